"""The nanobind module: numpy arrays reach the CPU op library and the answer matches numpy."""
import unittest

import numpy as np

from nfn import _native


class NativeModuleTest(unittest.TestCase):
    def test_identity(self):
        self.assertEqual(_native.abi_version(), 8)
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


if __name__ == "__main__":
    unittest.main()
