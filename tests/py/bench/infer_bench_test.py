"""`nfn bench infer` on a tiny llama weights file: one repeat of every weights format at two
prompt lengths, each configuration in its own process; the JSON's shape, positive rates and
memory, weight bytes that shrink with the format, the text table, the help path's imports, and
bad input in one line."""
import json
import os
import tempfile
import unittest

import numpy as np
from safetensors.numpy import save_file

from nfn import _native
from nfn.bench.infer import format_table
from nfn.infer.model import write_llmc
from nfn_probe import run_nfn

# Channels and hidden a multiple of 32, so every block matrix can be quantized.
LLAMA = dict(family="llama", max_seq_len=32, vocab_size=61, padded_vocab_size=61, num_layers=2, num_heads=4,
             num_kv_heads=1, head_dim=8, channels=32, hidden=64, rope_theta=10000.0, norm_eps=1e-6,
             tied_head=True, window_pattern="L")


def write_llama(path, seed=0):
    """A random llama in nfn's decoder weights file (safetensors with the geometry)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, rows, cols, _ in _native.NativeDecoder(**LLAMA).layout():
        w = rng.standard_normal((rows, cols) if rows > 1 else (cols,)) / np.sqrt(cols)
        tensors[name] = (1.0 + 0.1 * w if name.endswith("norm.weight") else w).astype(np.float32)
    geom = {k: LLAMA[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                  "num_kv_heads", "head_dim", "channels", "rope_theta", "norm_eps", "tied_head",
                                  "window_pattern")}
    geom["mlp_hidden"] = LLAMA["hidden"]
    save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": "llama", "geometry": json.dumps(geom)})


class InferBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.dir.name, "tiny.safetensors")
        write_llama(cls.path)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_one_repeat_of_the_grid(self):
        code, out, err, _ = run_nfn(["bench", "infer", "--checkpoint", self.path, "--prompt-lengths", "8,4",
                                     "--new-tokens", "4", "--repeats", "1", "--threads", "1", "--json"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["family"], "llama")
        self.assertEqual((report["backend"], report["batch"], report["threads"]), ("cpu", 1, 1))
        self.assertEqual(report["context"], 12)  # the longest prompt plus the new tokens
        self.assertIsInstance(report["host"]["cpu"]["model"], str)
        self.assertIsInstance(report["host"]["cpu"]["features"], list)
        rows = report["rows"]
        self.assertEqual([(r["weights"], r["prompt_tokens"]) for r in rows],
                         [(f, n) for f in ("f32", "q8_0", "q4_1", "nf4") for n in (4, 8)])
        for r in rows:
            with self.subTest(weights=r["weights"], prompt=r["prompt_tokens"]):
                self.assertNotIn("error", r)
                self.assertEqual((r["backend"], r["context"], r["new_tokens"]), ("cpu", 12, 4))
                for key in ("prefill_tokens_per_second", "decode_tokens_per_second", "weight_bytes",
                            "peak_rss_bytes", "end_rss_bytes", "base_rss_bytes", "load_seconds"):
                    self.assertGreater(r[key], 0, key)
                self.assertEqual((len(r["prefill_runs"]), len(r["decode_runs"])), (1, 1))
                self.assertGreaterEqual(r["peak_rss_bytes"], r["end_rss_bytes"])
                self.assertIsNone(r["device_bytes"])
                self.assertNotIn("greedy_tokens", r)
        size = {r["weights"]: r["weight_bytes"] for r in rows}
        self.assertGreater(size["f32"], size["q8_0"])
        self.assertGreater(size["q8_0"], size["q4_1"])
        self.assertGreater(size["q4_1"], size["nf4"])
        table = format_table(report)
        self.assertIn("batch 1", table)
        self.assertIn(report["host"]["cpu"]["model"], table)
        self.assertEqual(len([line for line in table.splitlines() if line.startswith(("f32 ", "q8_0", "q4_1", "nf4"))]),
                         8)

    def test_a_dense_gpt_runs_f32_only(self):
        path = os.path.join(self.dir.name, "gpt.bin")
        geom = dict(max_seq_len=16, vocab_size=100, num_layers=2, num_heads=2, channels=32, padded_vocab_size=128)
        write_llmc(path, geom, "f32", _native.gpt_random_parameters(16, 100, 2, 2, 32, 1))
        code, out, err, _ = run_nfn(["bench", "infer", "--checkpoint", path, "--prompt-lengths", "4",
                                     "--new-tokens", "2", "--repeats", "1", "--json"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual((report["family"], report["context"]), ("gpt", 16))  # the model's whole context
        self.assertEqual([(r["weights"], r["prompt_tokens"]) for r in report["rows"]], [("f32", 4)])
        self.assertEqual(report["rows"][0]["weight_bytes"], 4 * report["parameters"])
        code, _, err, _ = run_nfn(["bench", "infer", "--checkpoint", path, "--weights", "f32,q4_1"])
        self.assertEqual(code, 1)
        self.assertIn("--weights q4_1: a dense GPT checkpoint runs in f32 only", err)

    def test_the_cuda_table_shows_device_memory(self):
        row = {"weights": "f32", "prompt_tokens": 16, "prefill_tokens_per_second": 1000.0,
               "decode_tokens_per_second": 100.0, "weight_bytes": 538_060_032, "device_bytes": 600_000_000,
               "peak_rss_bytes": 1, "end_rss_bytes": 1}
        report = {"checkpoint": "c", "family": "llama", "parameters": 10, "backend": "cuda", "threads": None,
                  "host": {"cpu": {"model": "X", "features": []}, "cores": 2,
                           "gpu": {"devices": [{"name": "NVIDIA H200", "memory": None}]}},
                  "context": 80, "new_tokens": 64, "repeats": 3, "batch_note": "batch 1",
                  "rows": [row, {"weights": "q4_1", "prompt_tokens": 16, "error": "ran past 600 s"}]}
        lines = format_table(report).splitlines()
        self.assertTrue(lines[1].startswith("cuda: gpu NVIDIA H200; cpu X"), lines[1])
        self.assertIn("device MB", lines[4])
        self.assertEqual(lines[5].split(), ["f32", "16", "1000.0", "100.0", "538.1", "600.0"])
        self.assertEqual(lines[6].split(), ["q4_1", "16", "error:", "ran", "past", "600", "s"])

    def test_help_imports_only_the_standard_library(self):
        for args in (["bench", "--help"], ["bench", "infer", "--help"]):
            code, out, err, modules = run_nfn(args)
            self.assertEqual(code, 0, err)
            self.assertIn("usage: nfn bench", out)
            heavy = [m for m in modules if m.split(".")[0] in ("numpy", "torch") or m.startswith(("nfn._native",
                                                                                                  "nfn.bench",
                                                                                                  "nfn.infer"))]
            self.assertEqual(heavy, [])

    def test_bad_input_is_one_line(self):
        cases = [
            (["--weights", "bf16"], "--weights bf16: the engine keeps weights in f32 or block-quantized (q8_0, "
                                    "q4_1, nf4) and computes in f32; it has no bf16 weights"),
            (["--weights", "int8"], "--weights int8: expected some of f32, q8_0, q4_1, nf4"),
            (["--prompt-lengths", "0"], "--prompt-lengths '0': expected one or more counts of at least 1"),
            (["--prompt-lengths", "30"], "the longest prompt (30) plus --new-tokens (64) is 94 positions, more than "
                                         "the 32 the cache holds"),
            (["--new-tokens", "0"], "--new-tokens must be at least 1 (got 0)"),
        ]
        for extra, message in cases:
            with self.subTest(extra=extra):
                code, out, err, _ = run_nfn(["bench", "infer", "--checkpoint", self.path] + extra)
                self.assertEqual(code, 1, out)
                self.assertEqual(err.strip().splitlines(), [f"nfn bench: error: {message}"])


if __name__ == "__main__":
    unittest.main()
