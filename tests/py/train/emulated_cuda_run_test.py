"""The trainer on the CUDA backend, its kernels run on the CPU by the CUDA emulator
(//cuda/ops:libnfn_native_train_tile_ops_emulated.so): the loss curve of a tiny GPT tracks the
CPU backend's from the same seed (f32 tightly; bf16 with each attention path within bf16
tolerance), the report names the attention path, and a resumed bf16 run is bitwise
identical to an uninterrupted one (bf16 weights, f32 master weights and moments round-trip
through the checkpoint). tools/device_check.sh makes the same comparison on a real GPU."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from shards import write_shard

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
CPU_LIB = os.path.abspath(os.environ["NFN_CPU_OPS_LIB"])
EMULATED_LIB = os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])
VOCAB = 128
STEPS = 4


def run(args):
    proc = subprocess.run([TRAINER] + args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}): {proc.stderr}")
    return json.loads(proc.stdout)


def losses(report):
    return np.array([loss for _, loss in report["train_losses"]])


class EmulatedCudaRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        rng = np.random.default_rng(3)
        succ = rng.integers(0, VOCAB, size=VOCAB)  # a learnable stream: noisy successor table
        tokens = [0]
        for _ in range(6000):
            tokens.append(int(succ[tokens[-1]]) if rng.random() > 0.1 else int(rng.integers(VOCAB)))
        write_shard(os.path.join(data, "tiny_train_000000.bin"), tokens[:5000])
        write_shard(os.path.join(data, "tiny_val_000000.bin"), tokens[5000:])
        # Head size 64 and one 64-row tile: the tensor-core attention runs (not its fallback).
        cls.common = ["--train-data", data, "--vocab-size", str(VOCAB), "--num-layers", "2",
                      "--num-heads", "2", "--model-dim", "128", "--train-seq-len", "64", "--batch-size", "2",
                      "--train-batch-tokens", "256", "--max-steps", str(STEPS), "--warmup-steps", "1",
                      "--learning-rate", "3e-3", "--eval-every-steps", str(STEPS), "--eval-batches", "1",
                      "--checkpoint-every", "2", "--seed", "11", "--json"]
        cls.cpu = run(cls.common + ["--backend", "cpu", "--tile-ops-lib", CPU_LIB, "--threads", "2",
                                    "--output-dir", os.path.join(cls.tmp, "cpu")])
        cls.cuda = {}
        for dtype, attention in (("f32", "flash"), ("bf16", "flash"), ("bf16", "flash_mma")):
            out = os.path.join(cls.tmp, f"{dtype}_{attention}")
            cls.cuda[dtype, attention] = run(cls.common + [
                "--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", dtype,
                "--attention", attention, "--output-dir", out])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_loss_curves_track_the_cpu(self):
        reference = losses(self.cpu)
        self.assertLess(reference[-1], reference[0] - 0.2)  # it learns, so the curves say something
        for (dtype, attention), report in self.cuda.items():
            with self.subTest(dtype=dtype, attention=attention):
                bound = 1e-5 if dtype == "f32" else 1e-2
                worst = np.max(np.abs(losses(report) - reference) / reference)
                self.assertLess(worst, bound, f"{losses(report)} vs cpu {reference}")
                val = report["final_validation_loss"]
                self.assertLess(abs(val - self.cpu["final_validation_loss"]) / val, bound)

    def test_report_names_the_backend_and_attention_path(self):
        for (dtype, attention), report in self.cuda.items():
            lib = report["op_library"]
            self.assertEqual((lib["backend"], lib["dtype"], lib["path"]), ("cuda", dtype, EMULATED_LIB))
            self.assertTrue(lib["attention"].startswith("flash_mma" if attention == "flash_mma" else "flash_simt"),
                            lib["attention"])

    def test_bf16_resume_is_bitwise_identical(self):
        full = os.path.join(self.tmp, "bf16_flash_mma")
        out = os.path.join(self.tmp, "resumed")
        shutil.copytree(full, out)
        last = f"{STEPS:08d}"
        for f in [f"model_{last}.bin", f"state_{last}_00000.bin", f"DONE_{last}", "report.json"]:
            os.remove(os.path.join(out, f))
        report = run(self.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                    "--attention", "flash_mma", "--output-dir", out, "--resume", "auto"])
        self.assertEqual(report["resumed_from"], os.path.join(out, "model_00000002.bin"))
        self.assertEqual(report["train_losses"], self.cuda["bf16", "flash_mma"]["train_losses"][2:])
        for f in [f"model_{last}.bin", f"state_{last}_00000.bin"]:
            with open(os.path.join(out, f), "rb") as a, open(os.path.join(full, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)


if __name__ == "__main__":
    unittest.main()
