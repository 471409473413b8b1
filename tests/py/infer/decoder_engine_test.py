"""The KV-cached decoder engine (nanochat, llama) against the float64 PyTorch references of
tests/py/train/decoder_reference.py: logits and losses of a whole prefill, of the same tokens
fed one at a time and in uneven blocks (so rotary offsets, each layer's window over the cache
and nanochat's smear across blocks all count), of a continuation after cutting the cache back, and greedy generation token for token. The
weights file is written with the `safetensors` package, so the native reader is checked
against an independent writer. With NFN_EMULATED_CUDA_OPS_LIB set, the CUDA op library runs
the same checks under the emulator."""
import json
import os
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import save_file

from nfn import _native
from decoder_reference import llama_logits, nanochat_logits, random_weights, split

NANOCHAT = dict(family="nanochat", max_seq_len=20, vocab_size=61, padded_vocab_size=64, num_layers=4,
                num_heads=4, num_kv_heads=2, head_dim=8, channels=32, hidden=128, window_pattern="SSSL")
LLAMA = dict(family="llama", max_seq_len=20, vocab_size=61, padded_vocab_size=61, num_layers=2, num_heads=4,
             num_kv_heads=1, head_dim=8, channels=24, hidden=40, rope_theta=10000.0, norm_eps=1e-6,
             tied_head=True, window_pattern="L")
GEOMETRY_KEYS = ["max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "channels"]


def geometry(cfg):
    g = {k: cfg[k] for k in GEOMETRY_KEYS}
    g.update(mlp_hidden=cfg["hidden"], rope_theta=cfg.get("rope_theta", 100000.0),
             window_pattern=cfg["window_pattern"], tied_head=cfg.get("tied_head", False))
    if "norm_eps" in cfg:
        g["norm_eps"] = cfg["norm_eps"]
    return g


def write_weights(path, cfg, layout, flat, metadata=None):
    tensors = {}
    for name, rows, cols, offset in layout:
        t = flat[offset:offset + rows * cols]
        tensors[name] = t.reshape(rows, cols) if rows > 1 else t.copy()
    meta = {"format": "nfn-decoder", "model_family": cfg["family"], "geometry": json.dumps(geometry(cfg))}
    save_file(tensors, path, metadata=meta if metadata is None else metadata)


class DecoderEngineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.libraries = [""]
        emulated = os.environ.get("NFN_EMULATED_CUDA_OPS_LIB")
        if emulated:
            self.libraries.append(os.path.abspath(emulated))

    def model(self, cfg, seed):
        rng = np.random.default_rng(seed)
        layout = _native.NativeDecoder(**cfg).layout()
        flat = random_weights(layout, rng)
        path = os.path.join(self.dir.name, f"{cfg['family']}.safetensors")
        write_weights(path, cfg, layout, flat)
        return path, layout, flat

    def check_family(self, cfg, reference_logits):
        path, layout, flat = self.model(cfg, 5)
        p = split(torch.tensor(flat, dtype=torch.float64), layout)
        V, T = cfg["vocab_size"], cfg["max_seq_len"]
        tokens = np.random.default_rng(7).integers(0, V, size=T).astype(np.int32)
        want = reference_logits(p, torch.tensor(tokens[None]).long(), cfg)[0, :, :V].numpy()
        scale = np.abs(want).max()
        for library in self.libraries:
            with self.subTest(library=library or "cpu"):
                engine = _native.InferenceEngine(weights_file=path, library=library)
                # One prefill of every position.
                got = engine.forward(tokens, all_logits=True)
                self.assertEqual(got.shape, (T, V))
                np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=0)
                # The same positions through the cache, one at a time and in uneven blocks.
                for blocks in ([1] * T, [5, 1, 7, 3, 4]):
                    engine.reset()
                    rows, at = [], 0
                    for n in blocks:
                        rows.append(engine.forward(tokens[at:at + n], all_logits=True))
                        at += n
                    self.assertEqual(engine.position, T)
                    np.testing.assert_allclose(np.concatenate(rows), want, atol=2e-5 * scale, rtol=0,
                                               err_msg=f"blocks {blocks}")
                # Cut back to a shared prefix, then a continuation from there (twice).
                for _ in range(2):
                    engine.truncate(5)
                    self.assertEqual(engine.position, 5)
                    np.testing.assert_allclose(engine.forward(tokens[5:], all_logits=True), want[5:],
                                               atol=2e-5 * scale, rtol=0)
                with self.assertRaises(RuntimeError) as e:
                    engine.truncate(T + 1)
                self.assertIn(f"truncate: position {T + 1} is outside the cache's [0, {T}]", str(e.exception))
                # Per-position losses against the reference's cross-entropy.
                losses = engine.losses(tokens[:-1], tokens[1:])[0]
                ref = torch.nn.functional.cross_entropy(torch.tensor(want[:-1]), torch.tensor(tokens[1:]).long(),
                                                        reduction="none").numpy()
                np.testing.assert_allclose(losses, ref, atol=2e-5 * max(1.0, np.abs(ref).max()), rtol=0)
                # Greedy generation: each token the reference's argmax over the sequence so far.
                prompt = [int(t) for t in tokens[:3]]
                out = engine.generate(prompt, 12, temperature=0.0)
                seq = list(prompt)
                for _ in range(12):
                    logits = reference_logits(p, torch.tensor([seq]).long(), cfg)[0, -1, :V]
                    seq.append(int(torch.argmax(logits)))
                self.assertEqual(out["tokens"], seq[3:])
                self.assertEqual(out["stop_reason"], "max_new_tokens")

    def test_nanochat(self):
        self.check_family(NANOCHAT, nanochat_logits)

    def test_llama(self):
        self.check_family(LLAMA, llama_logits)

    def test_a_shorter_cache(self):
        path, layout, flat = self.model(NANOCHAT, 2)
        tokens = np.random.default_rng(4).integers(0, NANOCHAT["vocab_size"], size=20).astype(np.int32)
        full = _native.InferenceEngine(weights_file=path).forward(tokens, all_logits=True)
        short = _native.InferenceEngine(weights_file=path, context=8)
        self.assertEqual(short.max_seq_len, 8)
        # The model's windows (a quarter of its 20 positions) hold in the shorter cache.
        np.testing.assert_allclose(short.forward(tokens[:8], all_logits=True), full[:8],
                                   atol=2e-5 * np.abs(full).max(), rtol=0)
        with self.assertRaises(RuntimeError) as e:
            short.forward(tokens[8:9])
        self.assertIn("1 tokens at position 8 do not fit the context of 8", str(e.exception))
        self.assertEqual(_native.InferenceEngine(weights_file=path, context=99).max_seq_len, 20)
        with self.assertRaises(RuntimeError) as e:
            _native.InferenceEngine(weights_file=path, context=-1)
        self.assertIn("context must be >= 0 (0: the model's 20 positions), got -1", str(e.exception))

    def test_bad_weights_files(self):
        path, layout, flat = self.model(NANOCHAT, 1)
        bad = os.path.join(self.dir.name, "bad.safetensors")
        cases = [
            ({"format": "other"}, 'not an nfn decoder weights file (its __metadata__ format is "other"'),
            ({"format": "nfn-decoder", "model_family": "gpt2", "geometry": "{}"},
             '__metadata__ model_family "gpt2" is not nanochat or llama'),
            ({"format": "nfn-decoder", "model_family": "nanochat",
              "geometry": json.dumps({**geometry(NANOCHAT), "num_kv_heads": 3})},
             "__metadata__ geometry: num_kv_heads 3 does not divide num_heads 4"),
            ({"format": "nfn-decoder", "model_family": "nanochat",
              "geometry": json.dumps({k: v for k, v in geometry(NANOCHAT).items() if k != "head_dim"})},
             "__metadata__ geometry.head_dim must be a positive integer"),
        ]
        for metadata, message in cases:
            write_weights(bad, NANOCHAT, layout, flat, metadata)
            with self.assertRaises(ValueError) as e:
                _native.InferenceEngine(weights_file=bad)
            self.assertIn(message, str(e.exception))
            self.assertTrue(str(e.exception).startswith(bad + ": "), str(e.exception))
        # A tensor missing from the file.
        layout_less = [t for t in layout if t[0] != "lm_head.weight"]
        write_weights(bad, NANOCHAT, layout_less, flat)
        with self.assertRaises(ValueError) as e:
            _native.InferenceEngine(weights_file=bad)
        self.assertIn("lm_head.weight", str(e.exception))
        engine = _native.InferenceEngine(weights_file=path)
        with self.assertRaises(RuntimeError) as e:
            engine.forward(np.array([61], dtype=np.int32))
        self.assertIn("token id 61 is outside the vocabulary [0, 61)", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            engine.forward(np.zeros(21, dtype=np.int32))
        self.assertIn("21 tokens at position 0 do not fit the context of 20", str(e.exception))


if __name__ == "__main__":
    unittest.main()
