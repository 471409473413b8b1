"""The scorers on the native engine (small random GPT, nanochat and llama models): scores through
the prefix cache, with sequences that share prefixes and sequences that do not, equal those of
a fresh engine given each sequence whole; with the engine's truncate, and with a stand-in that
hides it."""
import json
import os
import tempfile
import unittest

import numpy as np
from safetensors.numpy import save_file

from nfn import _native
from nfn.evals import scoring

DECODERS = [
    dict(family="nanochat", max_seq_len=48, vocab_size=97, padded_vocab_size=128, num_layers=2, num_heads=2,
         num_kv_heads=1, head_dim=16, channels=32, hidden=128, window_pattern="SL"),
    dict(family="llama", max_seq_len=48, vocab_size=97, padded_vocab_size=97, num_layers=2, num_heads=4,
         num_kv_heads=2, head_dim=8, channels=32, hidden=48, window_pattern="L", tied_head=True),
]
GPT = dict(max_seq_len=48, vocab_size=97, num_layers=2, num_heads=2, channels=32, padded_vocab_size=128)


def decoder_file(cfg, path, seed):
    layout = _native.NativeDecoder(**cfg).layout()
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, rows, cols, _ in layout:
        w = (rng.standard_normal(rows * cols) / np.sqrt(cols)).astype(np.float32)
        if name.endswith("norm.weight") or "lambda" in name:
            w = 0.8 + 0.1 * w
        tensors[name] = w.reshape((rows, cols) if rows > 1 else (cols,))
    geometry = {k: cfg[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                    "num_kv_heads", "head_dim", "channels")}
    geometry.update(mlp_hidden=cfg["hidden"], rope_theta=100000.0, window_pattern=cfg["window_pattern"],
                    tied_head=cfg.get("tied_head", False))
    save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": cfg["family"],
                                       "geometry": json.dumps(geometry)})


class NoTruncate:
    """The engine as one without truncate sees it."""

    def __init__(self, engine):
        self.engine, self.max_seq_len = engine, engine.max_seq_len

    def reset(self):
        self.engine.reset()

    def forward(self, tokens, all_logits=False):
        return self.engine.forward(tokens, all_logits=all_logits)


def fresh_rows(make, tokens):
    engine = make()
    return engine.forward(np.asarray(tokens, dtype=np.int32), all_logits=True)


class NativeScoringTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.makers = {}
        for i, cfg in enumerate(DECODERS):
            path = os.path.join(cls.dir, f"{cfg['family']}.safetensors")
            decoder_file(cfg, path, i)
            cls.makers[cfg["family"]] = lambda path=path: _native.InferenceEngine(weights_file=path, threads=1)
        params = _native.gpt_random_parameters(GPT["max_seq_len"], GPT["vocab_size"], GPT["num_layers"],
                                               GPT["num_heads"], GPT["channels"], 3)  # vocabulary padded to 128
        cls.makers["gpt"] = lambda: _native.InferenceEngine(
            params, GPT["max_seq_len"], GPT["vocab_size"], GPT["num_layers"], GPT["num_heads"], GPT["channels"],
            GPT["padded_vocab_size"], threads=1)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.dir)

    def cases(self, seed):
        """Items of shared contexts and differing continuations, and lone sequences, in one stream."""
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(6):
            context = list(rng.integers(0, 97, rng.integers(3, 20)))
            choices = [list(rng.integers(0, 97, rng.integers(1, 8))) for _ in range(rng.integers(2, 5))]
            out.append([context + c for c in choices])
        out.append([list(rng.integers(0, 97, 60))])  # longer than the context: cropped from the left
        return out

    def check(self, family, wrap):
        make = self.makers[family]
        cache = scoring.PrefixCache(wrap(make()))
        for item in self.cases(11):
            starts = [min(scoring.common_prefix(item[0], s) for s in item)] * len(item)
            starts = [min(s, len(t) - 1) for s, t in zip(starts, item)]
            ends = [len(t) for t in item]
            got = scoring.mean_losses(cache, item, starts, ends)
            for tokens, start, end, value in zip(item, starts, ends, got):
                tokens, start, end = scoring.crop(tokens, start, end, 48)
                rows = fresh_rows(make, tokens[:end - 1])[start - 1:]
                want = scoring.log_softmax_at(rows, tokens[start:end]).mean()
                self.assertAlmostEqual(value, want, delta=1e-5 * max(1.0, abs(want)), msg=(family, tokens))
                # The greedy match reads the same rows.
                self.assertEqual(scoring.greedy_match(cache, tokens, start, end),
                                 bool(np.array_equal(rows.argmax(axis=1), tokens[start:end])))
            # The best next token among a few, after the first sequence.
            candidates = [3, 50, 96, 7]
            row = fresh_rows(make, item[0][-48:])[-1]  # a prompt longer than the context: its end
            self.assertEqual(scoring.best_choice(cache, item[0], candidates), int(np.argmax(row[candidates])))
        return cache

    def test_without_truncate(self):
        for family in self.makers:
            with self.subTest(family=family):
                self.check(family, NoTruncate)

    def test_with_truncate(self):
        for family in self.makers:
            with self.subTest(family=family):
                self.assertTrue(self.check(family, lambda e: e).can_truncate)


if __name__ == "__main__":
    unittest.main()
