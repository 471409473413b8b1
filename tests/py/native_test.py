"""The nanobind module: numpy arrays reach the CPU op library and the answer matches numpy."""
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from nfn import _native


class NativeModuleTest(unittest.TestCase):
    def test_identity(self):
        self.assertEqual(_native.abi_version(), 15)
        self.assertEqual(_native.backend_name(), "cpu")

    def test_sum_squares_matches_numpy(self):
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(n).astype(np.float32) for n in (1, 1000, 70001)]
        arrays.append(rng.standard_normal((16, 33)).astype(np.float32))
        want = sum(float(np.dot(a.ravel().astype(np.float64), a.ravel())) for a in arrays)
        self.assertAlmostEqual(_native.sum_squares(arrays) / want, 1.0, delta=1e-6)

    def test_converts_other_float_dtypes_and_rejects_non_arrays(self):
        self.assertEqual(_native.sum_squares([np.full(4, 1.5, dtype=np.float64)]), 9.0)
        with self.assertRaises(TypeError):
            _native.sum_squares(["not an array"])


class BindingRefusalsTest(unittest.TestCase):
    """What the bindings refuse, where the ops behind them read ids and sizes without bounds."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def engine(self, **kw):
        params = _native.gpt_random_parameters(16, 64, 1, 2, 16, 1)
        return _native.InferenceEngine(params, max_seq_len=16, vocab_size=64, num_layers=1, num_heads=2, channels=16,
                                       padded_vocab_size=128, **kw)

    def test_native_gpt_ids_and_dtypes(self):
        m = _native.NativeGPT(16, 64, 1, 2, 16)
        self.assertFalse(m.parameters().any())  # zeros until set, never the allocator's garbage
        x = np.array([[1, 2, 64]], dtype=np.int32)  # 64: past the vocabulary, into wte's padding
        with self.assertRaisesRegex(ValueError, r"input id 64 at position 2 is outside the vocabulary \[0, 64\)"):
            m.forward_backward(x, x, True, 1.0)
        with self.assertRaisesRegex(ValueError, "input id -1"):
            m.logits(np.array([[-1]], dtype=np.int32), 0)
        # Ids of any integer dtype and strides are taken as they are; one that int32 cannot hold,
        # or a float, is refused, never narrowed or rounded.
        with self.assertRaisesRegex(ValueError, "inputs: id 4294967299 at position 0 does not fit int32"):
            m.logits(np.array([[2 ** 32 + 3]], dtype=np.int64), 0)
        with self.assertRaisesRegex(TypeError, "inputs must be an array of integer token ids"):
            m.logits(np.array([[3.9]]), 0)
        m.set_parameters(_native.gpt_random_parameters(16, 64, 1, 2, 16, 2))
        y = np.array([[1, 2, 3]], dtype=np.int32)
        loss = m.forward_backward(y, y, True, 1.0)
        strided = np.array([[1, 0, 2, 0, 3, 0]], dtype=np.int64)[:, ::2]  # int64, not contiguous: the same ids
        self.assertEqual(m.forward_backward(strided, strided.astype(np.uint16), False, 0.0), loss)
        with self.assertRaisesRegex(RuntimeError, "eps must be positive"):
            m.optimizer_step(1, 1e-3, eps=0.0)

    def test_native_gpt_keeps_its_shape_when_a_larger_one_is_refused(self):
        # In a child whose address space is capped 0.3 GB above what it holds: a 64 x 64 batch's
        # activations (0.6 GiB) are refused with one line, and the 1 x 16 batch the model ran
        # before runs on, with the same loss.
        probe = """
import resource, numpy as np
from nfn import _native
m = _native.NativeGPT(64, 256, 4, 8, 512)
m.set_parameters(_native.gpt_random_parameters(64, 256, 4, 8, 512, 1))
rng = np.random.default_rng(0)
x, y = (rng.integers(0, 256, (1, 16)).astype(np.int32) for _ in range(2))
before = m.forward_backward(x, y, False)
held = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (held + 300_000_000, resource.getrlimit(resource.RLIMIT_AS)[1]))
X = rng.integers(0, 256, (64, 64)).astype(np.int32)
try:
    m.forward_backward(X, X, False)
    print("not refused")
except RuntimeError as e:
    print("refused:", e)
print("again:", m.forward_backward(x, y, False) == before)
"""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   MALLOC_ARENA_MAX="2")
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertRegex(proc.stdout, r"^refused: allocating the activations of micro-batch 64 x 64 \(0\.6 GiB\): "
                                      r"alloc: \d+ bytes failed\nagain: True\n$")

    def test_engine_callbacks_and_reentry(self):
        e = self.engine()
        with self.assertRaisesRegex(TypeError, "on_token must return True .go on. or False .stop., not None"):
            e.generate([1, 2], 3, temperature=0, on_token=lambda t: None)
        # The engine serves one call at a time: on_token calling back into it is refused.
        with self.assertRaisesRegex(RuntimeError, "InferenceEngine is in use"):
            e.generate([1, 2], 3, temperature=0, on_token=lambda t: e.forward(np.array([t], dtype=np.int32)) and True)
        e.reset()
        self.assertEqual(len(e.generate([1, 2], 3, temperature=0, on_token=lambda t: True)["tokens"]), 3)
        with self.assertRaisesRegex(ValueError, "targets: id -2147483649"):
            e.losses(np.array([1, 2], dtype=np.int64), np.array([2, -2 ** 31 - 1], dtype=np.int64))
        np.testing.assert_array_equal(e.losses(np.array([1, 9, 2, 9], dtype=np.int64)[::2], np.array([2, 3])),
                                      e.losses(np.array([1, 2], dtype=np.int32), np.array([2, 3], dtype=np.int32)))
        with self.assertRaisesRegex(TypeError, "on_token must be a callable or None"):
            e.generate([1, 2], 0, on_token=5)
        with self.assertRaisesRegex(ValueError, r"^threads: configure: threads=100000"):
            self.engine(threads=100000)

    def test_geometry_sizes_must_not_wrap(self):
        # Each product of the fields that sizes a buffer is bounded, so no byte count wraps (the
        # hunt's case: a geometry whose KV cache wrapped to 0 bytes, then a segfault).
        for geometry, term in [((16, 1 << 30, 1, 1, 1 << 14), "parameters"),
                               ((1 << 22, 128, 64, 128, 16384), "activations of a context"),
                               ((1 << 24, 1 << 17, 1, 1, 16), "logits of a context")]:
            with self.assertRaisesRegex(ValueError, f"the geometry is too large: .* {term}"):
                _native.gpt_param_layout(*geometry)
        with self.assertRaisesRegex(RuntimeError, "the geometry is too large: .* activations"):
            _native.InferenceEngine(np.zeros(4, dtype=np.float32), 1 << 22, 128, 64, 128, 16384, 128)
        with self.assertRaisesRegex(ValueError, "vocab_size must be at most 2"):
            _native.gpt_param_layout(16, 2 ** 31 - 1, 1, 1, 16)

    def test_shards_and_samplers(self):
        with self.assertRaisesRegex(ValueError, "num_shards must be >= 0"):
            _native.shard_order(-1, 1, 0)
        path = os.path.join(self.tmp, "x_train_000000.bin")
        with open(path, "wb") as f:
            f.write(struct.pack("<3i", 20240520, 1, 64) + bytes(1012) + bytes(128))
        sampler = _native.TokenBatchSampler([(path, 64, 2)], 2, 4, 0)  # windows at offsets 0, 8, .., 48
        with self.assertRaisesRegex(ValueError, "^data position: epoch 4611686018427387904 is past the last one the "
                                                r"sampler takes \(4611686018427387903\)$"):
            sampler.seek(2 ** 62, 0, 56)  # past the last epoch the counter takes (so it can never wrap)
        self.assertEqual(sampler.position(), (0, 0, 0))
        for width in (0, 3, 8):
            with self.assertRaisesRegex(ValueError, f"token width {width} bytes"):
                _native.TokenBatchSampler([(path, 64, width)], 2, 4, 0)
        fifo = os.path.join(self.tmp, "y_train_000000.bin")
        os.mkfifo(fifo)  # named like a shard: refused at once, not waited on
        for probe in (f"_native.find_shards({fifo!r}, 'train')",
                      f"_native.TokenBatchSampler([({fifo!r}, 64, 2)], 2, 4, 0).next()"):
            proc = subprocess.run([sys.executable, "-c", f"from nfn import _native\n{probe}"], capture_output=True,
                                  text=True, timeout=60, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("not a regular file", proc.stderr)


if __name__ == "__main__":
    unittest.main()
