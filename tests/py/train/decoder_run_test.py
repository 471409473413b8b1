"""The nanochat and llama trainer binaries end to end on tiny models: they learn a learnable
stream, checkpoints are safetensors files that the `safetensors` package reads with the
family's tensor names and nfn's geometry, a resumed run is bitwise the uninterrupted one,
and bad input (a GQA ratio or window pattern that does not fit, a checkpoint of another
family) is one line and a non-zero exit."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from safetensors.numpy import load_file
from shards import write_shard

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
VOCAB = 64


def trainer(family):
    return os.path.join(BIN_DIR, f"nfn_{family}_native_train")


def run(family, args, check=True):
    proc = subprocess.run([trainer(family)] + args, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{family} trainer failed ({proc.returncode}): {proc.stderr}")
    return proc


class DecoderRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        rng = np.random.default_rng(0)
        base = np.tile(np.arange(VOCAB), 200)  # a noisy repeating pattern
        tokens = np.where(rng.random(base.size) < 0.2, rng.integers(0, VOCAB, size=base.size), base)
        write_shard(os.path.join(cls.data, "tiny_train_000000.bin"), tokens[:10000])
        write_shard(os.path.join(cls.data, "tiny_val_000000.bin"), tokens[10000:12000])
        cls.common = ["--train-data", cls.data, "--vocab-size", str(VOCAB), "--num-layers", "3", "--num-heads", "4",
                      "--num-kv-heads", "2", "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "4",
                      "--max-steps", "6", "--eval-every-steps", "3", "--eval-batches", "2", "--checkpoint-every",
                      "3", "--backend", "cpu", "--threads", "2", "--seed", "5", "--sample-tokens", "8"]
        cls.reports = {}
        for family in ("nanochat", "llama"):
            out = os.path.join(cls.tmp, family)
            cls.reports[family] = json.loads(run(family, cls.common + ["--output-dir", out, "--json"]).stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_report_and_sample(self):
        for family, report in self.reports.items():
            self.assertEqual(report["model_family"], family)
            self.assertEqual(report["geometry"]["num_kv_heads"], 2)
            self.assertEqual(len(report["train_losses"]), 6)
            self.assertEqual(len(report["sample_tokens"]), 8)
            self.assertTrue(all(0 <= t < VOCAB for t in report["sample_tokens"]))

    def test_longer_run_learns_the_pattern(self):
        # 60 steps take the stream's 80%-predictable next token well below the uniform 4.16 nats.
        for family in ("nanochat", "llama"):
            out = os.path.join(self.tmp, family + "_long")
            args = self.common + ["--output-dir", out, "--json", "--max-steps", "60", "--eval-every-steps", "60",
                                  "--no-checkpoint", "--sample-tokens", "0"]
            if family == "llama":
                args += ["--learning-rate", "1e-2"]
            report = json.loads(run(family, args).stdout)
            self.assertLess(report["final_validation_loss"], 2.5, f"{family}: {report['final_validation_loss']}")

    def test_checkpoint_is_safetensors_with_family_names(self):
        model = os.path.join(self.tmp, "nanochat", "model_00000006.bin")
        tensors = load_file(model)
        self.assertEqual(tensors["transformer.wte.weight"].shape, (64, 32))  # vocabulary padded to 64
        self.assertEqual(tensors["transformer.h.0.attn.c_k.weight"].shape, (16, 32))  # 2 kv heads of 8
        self.assertEqual(sorted(k for k in tensors if k.startswith("value_embeds")),
                         ["value_embeds.0.weight", "value_embeds.2.weight"])
        from safetensors import safe_open
        with safe_open(model, "np") as f:
            meta = f.metadata()
        self.assertEqual(meta["model_family"], "nanochat")
        self.assertEqual(json.loads(meta["geometry"])["num_kv_heads"], 2)
        llama = load_file(os.path.join(self.tmp, "llama", "model_00000006.bin"))
        self.assertIn("model.layers.2.mlp.gate_proj.weight", llama)
        self.assertIn("lm_head.weight", llama)

    def test_resume_is_bitwise(self):
        for family in ("nanochat", "llama"):
            full = os.path.join(self.tmp, family)
            out = os.path.join(self.tmp, family + "_resumed")
            shutil.copytree(full, out)
            for f in ["model_00000006.bin", "state_00000006_00000.bin", "DONE_00000006", "report.json"]:
                os.remove(os.path.join(out, f))
            run(family, self.common + ["--output-dir", out, "--resume", "auto"])
            with open(os.path.join(full, "model_00000006.bin"), "rb") as a, \
                    open(os.path.join(out, "model_00000006.bin"), "rb") as b:
                self.assertEqual(a.read(), b.read(), family)

    def test_bad_input_is_one_line(self):
        cases = [
            ("nanochat", ["--num-kv-heads", "3"], "num_kv_heads 3 does not divide num_heads 4"),
            ("nanochat", ["--window-pattern", "SXL"], "window_pattern SXL has a letter other than S (short) and L"),
            ("llama", ["--depth", "4"], "--depth is nanochat's size knob"),
            ("nanochat", ["--depth", "4", "--num-layers", "2"], "--depth derives the layers"),
        ]
        for family, extra, want in cases:
            proc = run(family, self.common + ["--output-dir", os.path.join(self.tmp, "bad"), "--dry-run"] + extra,
                       check=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn(want, proc.stderr)
        # A llama checkpoint is not a nanochat's to resume or start from.
        proc = run("nanochat", self.common + ["--output-dir", os.path.join(self.tmp, "cross"), "--weights",
                                              os.path.join(self.tmp, "llama", "model_00000006.bin")], check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("holds a llama model, not nanochat", proc.stderr)
        # Nor is a dense GPT's llm.c file, and a GPT takes no decoder file either.
        gpt_dir = os.path.join(self.tmp, "gpt")
        run("gpt", ["--train-data", self.data, "--vocab-size", str(VOCAB), "--num-layers", "1", "--num-heads", "2",
                    "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "2", "--max-steps", "1",
                    "--eval-every-steps", "0", "--sample-tokens", "0", "--backend", "cpu", "--output-dir", gpt_dir])
        for family, weights, want in (
                ("nanochat", os.path.join(gpt_dir, "model_00000001.bin"), "holds a gpt model, not nanochat"),
                ("gpt", os.path.join(self.tmp, "nanochat", "model_00000006.bin"), "holds a nanochat model, not gpt")):
            proc = run(family, ["--train-data", self.data, "--vocab-size", str(VOCAB), "--train-seq-len", "16",
                                "--batch-size", "2", "--weights", weights,
                                "--output-dir", os.path.join(self.tmp, "cross_" + family)], check=False)
            self.assertNotEqual(proc.returncode, 0)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn(want, proc.stderr)

    def test_depth_plan(self):
        plan = json.loads(run("nanochat", ["--depth", "4", "--dry-run", "--json", "--vocab-size", "1024"]).stdout)
        g = plan["geometry"]
        self.assertEqual((g["num_layers"], g["channels"], g["num_heads"], g["head_dim"], g["max_seq_len"]),
                         (4, 256, 2, 128, 2048))
        self.assertEqual(plan["batch"]["train_batch_tokens"], 524288)
        self.assertEqual(plan["batch"]["grad_accum_steps"], 524288 // (32 * 2048))
        # 20 tokens per scaling parameter (the blocks' matrices and the head), 524,288 a step.
        scaling = 4 * (4 * 256 * 256 + 2 * 256 * 1024) + 2 * 2 * 12 + 1024 * 256
        self.assertEqual(plan["schedule"]["max_steps"], -(-20 * scaling // 524288))
        self.assertEqual(plan["schedule"]["warmdown_ratio"], 0.4)


if __name__ == "__main__":
    unittest.main()
