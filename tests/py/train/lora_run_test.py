"""LoRA and QLoRA runs of the llama trainer end to end on a tiny model: adapters over a trained
--init-from model learn a new stream; the checkpoint holds the adapters alone (safetensors,
format nfn-lora, naming its base), resumes bitwise, and runs in the inference engine as the
merged model (the same loss as the training model's adapters over the base), and `nfn export
--merge-lora` (and --hf) write that merged model; QLoRA over a q4_1 base learns too; bad
combinations are one line."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

from nfn import _native
from nfn_probe import run_nfn
from shards import write_shard

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
VOCAB = 64
GEOMETRY = ["--vocab-size", str(VOCAB), "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2",
            "--model-dim", "32", "--mlp-hidden", "64"]


def run(args, check=True):
    proc = subprocess.run([os.path.join(BIN_DIR, "nfn_llama_native_train")] + args, capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"llama trainer failed ({proc.returncode}): {proc.stderr}")
    return proc


def stream(seed, step):
    rng = np.random.default_rng(seed)
    base = (np.arange(12000) * step) % VOCAB  # a pattern of its own per stream
    return np.where(rng.random(base.size) < 0.1, rng.integers(0, VOCAB, size=base.size), base)


class LoraRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = {}
        for name, step in (("base", 1), ("new", 7)):
            d = os.path.join(cls.tmp, "data_" + name)
            os.makedirs(d)
            tokens = stream(len(name), step)
            write_shard(os.path.join(d, "tiny_train_000000.bin"), tokens[:10000])
            write_shard(os.path.join(d, "tiny_val_000000.bin"), tokens[10000:])
            cls.data[name] = d
        cls.common = ["--train-seq-len", "16", "--batch-size", "4", "--eval-batches", "2", "--backend", "cpu",
                      "--threads", "2", "--seed", "5", "--sample-tokens", "4", "--json"]
        cls.base = os.path.join(cls.tmp, "base")
        run(GEOMETRY + cls.common + ["--train-data", cls.data["base"], "--max-steps", "40", "--eval-every-steps", "40",
                                     "--output-dir", cls.base])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def lora(self, out, steps, extra=(), check=True):
        return run(self.common + ["--init-from", self.base, "--train-data", self.data["new"], "--max-steps",
                                  str(steps), "--eval-every-steps", str(steps), "--checkpoint-every", "10",
                                  "--lora-rank", "4", "--lora-alpha", "8", "--learning-rate", "0.03",
                                  "--warmup-steps", "0",
                                  "--output-dir", out] + list(extra), check)

    def test_adapters_learn_checkpoint_alone_and_resume_bitwise(self):
        out = os.path.join(self.tmp, "lora")
        report = json.loads(self.lora(out, 20).stdout)
        losses = [loss for _, loss in report["train_losses"]]
        self.assertLess(np.mean(losses[-5:]), np.mean(losses[:3]) - 0.3, losses)
        model = os.path.join(out, "model_00000020.bin")
        with safe_open(model, "numpy") as f:
            meta, names = f.metadata(), list(f.keys())
        self.assertEqual(meta["format"], "nfn-lora")
        self.assertEqual(json.loads(meta["lora"]), {"rank": 4, "alpha": 8, "targets": "all", "quantize_base": None})
        self.assertEqual(meta["base"], os.path.realpath(os.path.join(self.base, "model_00000040.bin")))
        self.assertTrue(all(".lora_A.weight" in n or ".lora_B.weight" in n for n in names), names)
        self.assertEqual(len(names), 2 * 4 * 2)  # A and B, four matrices, two layers
        self.assertLess(os.path.getsize(model), os.path.getsize(meta["base"]) / 3)
        # From the step-10 checkpoint, --resume auto writes the same step-20 adapters byte for byte.
        half = os.path.join(self.tmp, "lora_half")
        shutil.copytree(out, half)
        for f in ["model_00000020.bin", "state_00000020_00000.bin", "DONE_00000020", "report.json"]:
            os.remove(os.path.join(half, f))
        self.lora(half, 20, ["--resume", "auto"])
        with open(model, "rb") as a, open(os.path.join(half, "model_00000020.bin"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        a = load_file(model)
        # The inference engine runs the checkpoint as the merged model: the training model's loss.
        engine = _native.InferenceEngine(weights_file=model)
        tokens = stream(9, 7)[:17].astype(np.int32)
        got = float(np.sum(engine.losses(tokens[:-1], tokens[1:])))
        geometry = report["geometry"]
        native = _native.NativeDecoder("llama", geometry["max_seq_len"], VOCAB, VOCAB, 2, 4, 2, 8, 32, 64,
                                       rope_theta=float(geometry["rope_theta"]), lora_rank=4, lora_alpha=8.0)
        layout = native.layout()
        native.set_parameters(np.concatenate([a[n].reshape(-1) for n, _, _, _ in layout]))
        base = load_file(meta["base"])
        full = _native.NativeDecoder("llama", geometry["max_seq_len"], VOCAB, VOCAB, 2, 4, 2, 8, 32, 64,
                                     rope_theta=float(geometry["rope_theta"]))
        native.set_base(np.concatenate([base[n].reshape(-1) for n, _, _, _ in full.layout()]))
        want = native.forward_backward(tokens[None, :-1], tokens[None, 1:], False, 1.0)
        self.assertAlmostEqual(got, want, delta=1e-4 * abs(want))

    def test_merge_lora_export(self):
        out = os.path.join(self.tmp, "lora_merge")
        self.lora(out, 10)
        env = {"NFN_NATIVE_BIN_DIR": BIN_DIR}
        merged = os.path.join(self.tmp, "merged")
        code, _, err, _ = run_nfn(["export", "--checkpoint", out, "--merge-lora", merged, "--json"], env=env)
        self.assertEqual(code, 0, err)
        with safe_open(os.path.join(merged, "model_00000000.bin"), "numpy") as f:
            self.assertEqual(f.metadata()["format"], "nfn-decoder")
        # The merged checkpoint and the adapters' checkpoint are one model to the engine.
        tokens = stream(3, 7)[:17].astype(np.int32)
        a = _native.InferenceEngine(weights_file=os.path.join(out, "model_00000010.bin"))
        b = _native.InferenceEngine(weights_file=os.path.join(merged, "model_00000000.bin"))
        np.testing.assert_array_equal(a.losses(tokens[:-1], tokens[1:]), b.losses(tokens[:-1], tokens[1:]))
        # --hf takes the LoRA checkpoint as its merged model too; a whole checkpoint is refused.
        hf = os.path.join(self.tmp, "lora_hf")
        code, _, err, _ = run_nfn(["export", "--checkpoint", out, "--hf", hf], env=env)
        self.assertEqual(code, 0, err)
        want = load_file(os.path.join(merged, "model_00000000.bin"))
        got = load_file(os.path.join(hf, "model.safetensors"))
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        code, _, err, _ = run_nfn(["export", "--checkpoint", merged, "--merge-lora", os.path.join(self.tmp, "x")],
                                  env=env)
        self.assertEqual(code, 1)
        self.assertIn("not a LoRA checkpoint: its model file holds the whole model already", err)

    def test_qlora_over_a_quantized_base_learns(self):
        out = os.path.join(self.tmp, "qlora")
        report = json.loads(self.lora(out, 20, ["--quantize-base", "q4_1", "--lora-targets", "mlp"]).stdout)
        losses = [loss for _, loss in report["train_losses"]]
        self.assertLess(np.mean(losses[-5:]), np.mean(losses[:3]) - 0.3, losses)
        with safe_open(os.path.join(out, "model_00000020.bin"), "numpy") as f:
            self.assertEqual(json.loads(f.metadata()["lora"])["quantize_base"], "q4_1")
            self.assertTrue(all("mlp." in n for n in f.keys()))

    def test_bad_input_is_one_line(self):
        cases = [
            (GEOMETRY + ["--lora-rank", "4"], "--lora-rank trains adapters over a trained model: name it with "
                                              "--init-from CHECKPOINT"),
            (GEOMETRY + ["--lora-alpha", "4"], "--lora-alpha shapes LoRA adapters: give --lora-rank R too"),
            (["--init-from", self.base, "--lora-rank", "4", "--init-optimizer"],
             "--init-optimizer: a LoRA run's optimizer holds its adapters only"),
            (["--init-from", self.base, "--lora-rank", "33"], "--lora-rank 33 exceeds an adapted matrix's smaller "
                                                              "side (64 x 32)"),
            (["--init-from", self.base, "--lora-rank", "0"], "--lora-rank"),
        ]
        for args, message in cases:
            proc = run(self.common + ["--train-data", self.data["new"], "--max-steps", "1", "--output-dir",
                                      os.path.join(self.tmp, "bad")] + args, check=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(message, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        # Resuming adapters of another rank.
        out = os.path.join(self.tmp, "lora_rank")
        self.lora(out, 10)
        proc = self.lora(out, 20, ["--resume", "auto", "--lora-rank", "2"], check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn('holds adapters {"rank":4', proc.stderr)


if __name__ == "__main__":
    unittest.main()
