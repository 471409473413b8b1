"""tools/bench_infer.py: its PyTorch llama with a KV cache gives the logits of the float64
reference written from Hugging Face's definition (tests/py/train/decoder_reference.py) on the
same weights, prefilled whole, token by token and in blocks, in the eager and the static
(compiled) form; torch.compile runs it; and one quick round of the tool on a tiny model passes
its same-model check and reports both sides' rows with ratios."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import save_file

from nfn import _native
from decoder_reference import llama_logits, random_weights, split

TOOL = os.path.abspath(os.environ["NFN_BENCH_INFER"])
sys.path.insert(0, os.path.dirname(TOOL))
import bench_infer  # noqa: E402

# Channels and hidden a multiple of 32 (the quantized formats' blocks); an untied head here,
# a tied one in the round.
LLAMA = dict(family="llama", max_seq_len=24, vocab_size=61, padded_vocab_size=61, num_layers=2, num_heads=4,
             num_kv_heads=2, head_dim=8, channels=32, hidden=64, rope_theta=10000.0, norm_eps=1e-6,
             tied_head=False, window_pattern="L")


def write_llama(path, cfg, seed):
    """(layout, flat weights) of a random llama written as nfn's decoder weights file."""
    layout = _native.NativeDecoder(**cfg).layout()
    flat = random_weights(layout, np.random.default_rng(seed))
    tensors = {name: flat[o:o + r * c].reshape(r, c) if r > 1 else flat[o:o + c].copy() for name, r, c, o in layout}
    geom = {k: cfg[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                "num_kv_heads", "head_dim", "channels", "rope_theta", "norm_eps", "tied_head",
                                "window_pattern")}
    geom["mlp_hidden"] = cfg["hidden"]
    save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": "llama", "geometry": json.dumps(geom)})
    return layout, flat


class ReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.dir.name, "llama.safetensors")
        layout, flat = write_llama(cls.path, LLAMA, 3)
        cls.geom, cls.tensors = bench_infer.read_llama(cls.path)
        cls.tokens = [int(t) for t in np.random.default_rng(1).integers(0, LLAMA["vocab_size"], LLAMA["max_seq_len"])]
        cls.p = split(torch.tensor(flat, dtype=torch.float64), layout)
        cls.want = llama_logits(cls.p, torch.tensor([cls.tokens]), LLAMA)[0, :, :LLAMA["vocab_size"]]

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def logits(self, model, blocks):
        rows, at = [], 0
        with torch.inference_mode():
            for n in blocks:
                rows.append(model.step(torch.tensor(self.tokens[at:at + n]), torch.arange(at, at + n)))
                at += n
        return torch.cat(rows).double()

    def test_logits_match_the_float64_reference(self):
        T = LLAMA["max_seq_len"]
        for dtype, static, tol in (("f64", False, 1e-12), ("f64", True, 1e-12), ("f32", False, 2e-5),
                                   ("f32", True, 2e-5), ("bf16", False, 6e-2)):
            for blocks in ([T], [1] * T, [5, 1, 7, 3, 8]):
                with self.subTest(dtype=dtype, static=static, blocks=blocks):
                    model = bench_infer.TorchLlama(torch, self.geom, self.tensors, T, dtype, static)
                    got = self.logits(model, blocks)
                    scale = self.want.abs().max().item()
                    self.assertLess((got - self.want).abs().max().item(), tol * scale)

    def test_greedy_generation_eager_and_compiled(self):
        prompt, n = self.tokens[:5], 8
        seq = list(prompt)
        for _ in range(n):  # each token the float64 reference's argmax over the sequence so far
            seq.append(int(llama_logits(self.p, torch.tensor([seq]), LLAMA)[0, -1, :LLAMA["vocab_size"]].argmax()))
        for mode in ("eager-f32", "compile-f32"):
            with self.subTest(mode=mode):
                gen = bench_infer.Generator(torch, self.geom, self.tensors, 16, mode)
                self.assertEqual(gen.generate(prompt, n)[0], seq[5:])
                self.assertEqual(gen.generate(prompt, n)[0], seq[5:])  # the cache overwritten, not appended


class RoundTest(unittest.TestCase):
    def test_one_quick_round(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tiny.safetensors")
            write_llama(path, dict(LLAMA, max_seq_len=32, tied_head=True), 4)
            argv = [sys.executable, TOOL, "--checkpoint", path, "--prompt-lengths", "4,8", "--new-tokens", "4",
                    "--repeats", "1", "--threads", "1", "--weights", "f32,q4_1", "--torch-modes",
                    "eager-f32,eager-bf16", "--json"]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        result = json.loads(proc.stdout)
        self.assertTrue(result["check"]["equal"], result["check"])
        self.assertEqual(len(result["check"]["nfn"]), bench_infer.CHECK_TOKENS)
        self.assertEqual((result["batch"], result["threads"], result["context"]), (1, 1, 12))
        self.assertIsInstance(result["host"]["cpu"]["model"], str)
        self.assertEqual([r["prompt_tokens"] for r in result["rows"]], [4, 8])
        for row in result["rows"]:
            self.assertEqual(list(row["nfn"]), ["f32", "q4_1"])
            self.assertEqual(list(row["pytorch"]), ["eager-f32", "eager-bf16"])
            self.assertEqual(row["greedy_tokens_matching"], "4/4")
            for side in ("nfn", "pytorch"):
                for name, r in row[side].items():
                    for key in ("prefill_tokens_per_second", "decode_tokens_per_second", "peak_rss_bytes",
                                "end_rss_bytes", "weight_bytes"):
                        self.assertGreater(r[key], 0, f"{side} {name} {key}")
            for fmt in ("f32", "q4_1"):
                for phase in ("prefill", "decode"):
                    best = row["pytorch_fastest"][phase]
                    key = f"{phase}_tokens_per_second"
                    self.assertAlmostEqual(row["ratio"][fmt][phase], row["nfn"][fmt][key] / row["pytorch"][best][key])
        self.assertEqual(list(result)[-1], "ratio")
        self.assertGreater(result["ratio"]["prefill"], 0)
        self.assertGreater(result["ratio"]["decode"], 0)


if __name__ == "__main__":
    unittest.main()
