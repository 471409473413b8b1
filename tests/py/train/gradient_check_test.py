"""Finite differences on the whole native model: the analytic gradient of the mean loss
with respect to parameters sampled from every tensor matches central differences."""
import unittest

import numpy as np

from nfn import _native

T, V, L, NH, C, B = 8, 23, 1, 2, 16, 2


class WholeModelGradientTest(unittest.TestCase):
    def test_central_differences(self):
        rng = np.random.default_rng(3)
        params = _native.gpt_random_parameters(T, V, L, NH, C, 7)
        params += 0.05 * rng.standard_normal(params.size).astype(np.float32)  # biases, norms away from 0/1
        batch = rng.integers(0, V, size=(B, T + 1)).astype(np.int32)
        x, y = batch[:, :-1].copy(), batch[:, 1:].copy()
        m = _native.NativeGPT(T, V, L, NH, C)
        m.set_parameters(params)
        m.zero_grads()
        m.forward_backward(x, y, True, 1.0 / (B * T))
        grads = m.gradients()

        def loss_at(p):
            m.set_parameters(p)
            return m.forward_backward(x, y, False, 0.0)

        checked = 0
        for name, shape, offset in _native.gpt_param_layout(T, V, L, NH, C):
            n = int(np.prod(shape))
            # wte rows beyond the vocabulary are padding: zero gradient by construction.
            n_used = V * C if name == "wte" else n
            for i in rng.choice(n_used, size=min(6, n_used), replace=False):
                k = offset + int(i)
                h = 1e-2
                p = params.copy()
                p[k] += h
                up = loss_at(p)
                p[k] -= 2 * h
                down = loss_at(p)
                fd = (up - down) / (2 * h)
                self.assertLess(abs(fd - grads[k]), 2e-4 + 2e-2 * abs(grads[k]),
                                f"{name}[{i}]: analytic {grads[k]:.6g} vs finite difference {fd:.6g}")
                checked += 1
        self.assertGreater(checked, 80)
        pad = grads[V * C:128 * C]
        self.assertTrue(np.all(pad == 0), "padding rows of wte must get no gradient")


if __name__ == "__main__":
    unittest.main()
