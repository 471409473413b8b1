"""The per-target weighted cross-entropy through the whole model (nfn rl's loss), on the nanochat
decoder and the dense GPT: with weights w, the loss sum is sum_i w_i l_i and the gradient is
sum_i w_i g_i, where l_i and g_i come from runs that learn target i alone (the unweighted op,
every other target masked), summed here in float64; a weight of 0 is a masked target; a
weight array of another shape, or weights without targets, is refused; an upload without
weights weighs every target 1 again."""
import unittest

import numpy as np

from nfn import _native

B, T, V = 2, 5, 40


def decoder():
    m = _native.NativeDecoder("nanochat", 16, V, V, 2, 2, 2, 16, 32, 128)
    m.set_parameters(_native.decoder_random_parameters("nanochat", 16, V, V, 2, 2, 2, 16, 32, 128, 3) +
                     np.float32(0.01))  # nanochat zeroes its output projections: move them off 0
    return m


def gpt():
    m = _native.NativeGPT(16, V, 2, 2, 16)
    m.set_parameters(_native.gpt_random_parameters(16, V, 2, 2, 16, 3))
    return m


class WeightedLossTest(unittest.TestCase):
    def check(self, make):
        rng = np.random.default_rng(0)
        inputs = rng.integers(0, V, (B, T)).astype(np.int32)
        targets = rng.integers(0, V, (B, T)).astype(np.int32)
        targets[0, 1] = -1  # masked
        weights = rng.uniform(-1.5, 1.5, (B, T)).astype(np.float32)
        weights[1, 2] = 0.0
        model = make()
        model.zero_grads()
        total = model.forward_backward(inputs, targets, True, 0.5, weights=weights)
        got = model.gradients().astype(np.float64)
        want_total, want = 0.0, np.zeros_like(got)
        for b in range(B):
            for t in range(T):
                if targets[b, t] < 0:
                    continue
                alone = np.full_like(targets, -1)
                alone[b, t] = targets[b, t]
                model.zero_grads()
                loss = model.forward_backward(inputs, alone, True, 1.0)
                if make is gpt:
                    loss *= B * T  # NativeGPT returns the mean over the batch's positions
                want_total += float(weights[b, t]) * loss
                want += float(weights[b, t]) * 0.5 * model.gradients().astype(np.float64)
        if make is gpt:
            total *= B * T
        self.assertAlmostEqual(total, want_total, delta=1e-4 * (1 + abs(want_total)))
        scale = np.abs(want).max()
        self.assertGreater(scale, 1e-4)
        np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=1e-3)

        # A zero weight is a masked target; without weights every target weighs 1 again.
        masked = targets.copy()
        masked[1, 2] = -1
        model.zero_grads()
        model.forward_backward(inputs, masked, True, 0.5, weights=weights)
        np.testing.assert_allclose(model.gradients(), got, atol=1e-6 * scale)
        model.zero_grads()
        plain = model.forward_backward(inputs, targets, True, 1.0)
        g_plain = model.gradients()
        model.zero_grads()
        ones = model.forward_backward(inputs, targets, True, 1.0, weights=np.ones((B, T), np.float32))
        self.assertEqual(plain, ones)
        np.testing.assert_array_equal(model.gradients(), g_plain)

        with self.assertRaisesRegex(ValueError, r"weights must have the \(B, T\) shape"):
            model.forward_backward(inputs, targets, True, 1.0, weights=np.ones((B, T + 1), np.float32))

    def test_decoder(self):
        self.check(decoder)

    def test_gpt(self):
        self.check(gpt)


if __name__ == "__main__":
    unittest.main()
