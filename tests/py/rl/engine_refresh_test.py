"""InferenceEngine.set_parameters, how nfn rl's sampler takes each step's weights: an engine given
new parameters in memory answers as an engine built from a weights file holding them (logits
bit for bit, the cache empty), for the nanochat decoder and the dense GPT; a vector of the
wrong size is refused and the engine says it holds no model rather than crash."""
import os
import tempfile
import unittest

import numpy as np

from nfn import _native
from nfn.weights import decoder_checkpoint

GEOMETRY = {"max_seq_len": 16, "vocab_size": 40, "padded_vocab_size": 40, "num_layers": 2, "num_heads": 2,
            "num_kv_heads": 2, "head_dim": 16, "channels": 32, "mlp_hidden": 128, "rope_theta": 100000,
            "window_pattern": "L", "tied_head": False}
ARGS = ("nanochat", 16, 40, 40, 2, 2, 2, 16, 32, 128)
TOKENS = np.array([1, 5, 7, 3, 9], dtype=np.int32)


def write_weights(directory, params):
    layout = {name: (offset, rows * cols) for name, rows, cols, offset in _native.NativeDecoder(*ARGS).layout()}
    shapes = dict(decoder_checkpoint.layout("nanochat", GEOMETRY))

    def tensor(name):
        offset, size = layout[name]
        return params[offset:offset + size].reshape(shapes[name])

    decoder_checkpoint.write_decoder(directory, "nanochat", GEOMETRY, tensor, {"step": 0})
    return os.path.join(directory, decoder_checkpoint.model_file_name(0))


class EngineRefreshTest(unittest.TestCase):
    def test_decoder(self):
        a = _native.decoder_random_parameters(*ARGS, 1) + np.float32(0.01)
        b = _native.decoder_random_parameters(*ARGS, 2) + np.float32(0.02)
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as d:
            os.mkdir(os.path.join(d, "a"))
            os.mkdir(os.path.join(d, "b"))
            engine = _native.InferenceEngine(weights_file=write_weights(os.path.join(d, "a"), a), threads=1)
            fresh = _native.InferenceEngine(weights_file=write_weights(os.path.join(d, "b"), b), threads=1)
        before = engine.forward(TOKENS, all_logits=True)
        engine.set_parameters(b)
        self.assertEqual(engine.position, 0)
        got, want = engine.forward(TOKENS, all_logits=True), fresh.forward(TOKENS, all_logits=True)
        np.testing.assert_array_equal(got, want)
        self.assertFalse(np.array_equal(before, got))
        with self.assertRaises(RuntimeError):
            engine.set_parameters(b[:-1])
        with self.assertRaisesRegex(RuntimeError, "holds no model"):
            engine.forward(TOKENS)

    def test_gpt(self):
        geometry = (16, 40, 2, 2, 16)
        a, b = _native.gpt_random_parameters(*geometry, 1), _native.gpt_random_parameters(*geometry, 2)
        engine = _native.InferenceEngine(a, *geometry, 128, threads=1)
        fresh = _native.InferenceEngine(b, *geometry, 128, threads=1)
        engine.set_parameters(b)
        np.testing.assert_array_equal(engine.forward(TOKENS, all_logits=True), fresh.forward(TOKENS, all_logits=True))


if __name__ == "__main__":
    unittest.main()
