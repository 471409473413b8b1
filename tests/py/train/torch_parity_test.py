"""The native GPT (CPU op library) against an independent PyTorch model built in the test:
same weights, same batches; losses, every gradient tensor, and several AdamW steps with
global-norm clipping must match within fp32 tolerance."""
import unittest

import numpy as np
import torch

from nfn import _native
from gpt_reference import NAMES, forward, split

T, V, L, NH, C, B = 16, 97, 2, 2, 32, 3
VP = 128  # padded vocabulary, as llm.c pads


def batches(rng, n):
    return [rng.integers(0, V, size=(B, T + 1)).astype(np.int32) for _ in range(n)]


class TorchParityTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        rng = np.random.default_rng(1)
        self.params = _native.gpt_random_parameters(T, V, L, NH, C, 42)
        # Non-trivial norms and biases so that every tensor's gradient is exercised.
        layout = {name: (shape, off) for name, shape, off in _native.gpt_param_layout(T, V, L, NH, C)}
        for name in ["ln1w", "ln1b", "ln2w", "ln2b", "lnfw", "lnfb", "qkvb", "attprojb", "fcb", "fcprojb"]:
            shape, off = layout[name]
            n = int(np.prod(shape))
            base = 1.0 if name.endswith("w") and name.startswith("ln") else 0.0
            self.params[off:off + n] = base + 0.1 * rng.standard_normal(n).astype(np.float32)
        self.data = batches(rng, 5)

    def native(self):
        m = _native.NativeGPT(T, V, L, NH, C)
        m.set_parameters(self.params)
        return m

    def test_loss_and_gradients(self):
        m = self.native()
        batch = self.data[0]
        m.zero_grads()
        loss = m.forward_backward(batch[:, :-1].copy(), batch[:, 1:].copy(), True, 1.0 / (B * T))
        grads = m.gradients()

        flat = torch.tensor(self.params, dtype=torch.float64, requires_grad=True)
        ref = forward(split(flat, T, VP, L, C), torch.tensor(batch[:, :-1]).long(),
                      torch.tensor(batch[:, 1:]).long(), V, NH)
        ref.backward()
        self.assertAlmostEqual(loss, ref.item(), delta=1e-5 * abs(ref.item()))
        ref_grads = split(flat.grad.float(), T, VP, L, C)
        ours = split(torch.tensor(grads), T, VP, L, C)
        for name in NAMES:
            want, got = ref_grads[name], ours[name]
            scale = want.abs().max().item()
            self.assertGreater(scale, 0, f"{name}: reference gradient is all zero")
            err = (got - want).abs().max().item() / scale
            self.assertLess(err, 1e-4, f"{name}: max relative gradient error {err:.2e}")

    def test_adamw_steps_with_clipping(self):
        m = self.native()
        lr, wd, b1, b2, eps, clip = 3e-3, 0.1, 0.9, 0.95, 1e-8, 0.5
        flat = torch.tensor(self.params, dtype=torch.float64, requires_grad=True)
        decay_names = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
        views = split(flat, T, VP, L, C)
        # One leaf per tensor so weight decay can differ; the optimizer updates them in place.
        leaves = {n: views[n].detach().clone().requires_grad_(True) for n in NAMES}
        opt = torch.optim.AdamW([
            {"params": [leaves[n] for n in NAMES if n in decay_names], "weight_decay": wd},
            {"params": [leaves[n] for n in NAMES if n not in decay_names], "weight_decay": 0.0},
        ], lr=lr, betas=(b1, b2), eps=eps)
        for step, batch in enumerate(self.data, start=1):
            x, y = batch[:, :-1].copy(), batch[:, 1:].copy()
            m.zero_grads()
            loss = m.forward_backward(x, y, True, 1.0 / (B * T))
            norm = m.optimizer_step(step, lr, b1, b2, eps, wd, clip)

            opt.zero_grad()
            ref = forward(leaves, torch.tensor(x).long(), torch.tensor(y).long(), V, NH)
            ref.backward()
            ref_norm = torch.sqrt(sum((leaves[n].grad ** 2).sum() for n in NAMES)).item()
            self.assertGreater(ref_norm, clip, "the test must exercise clipping")
            for n in NAMES:
                leaves[n].grad *= min(1.0, clip / ref_norm)
            opt.step()
            self.assertAlmostEqual(loss, ref.item(), delta=2e-5 * abs(ref.item()), msg=f"step {step}")
            self.assertAlmostEqual(norm, ref_norm, delta=1e-4 * ref_norm, msg=f"step {step}")
        got = split(torch.tensor(m.parameters()), T, VP, L, C)
        for n in NAMES:
            err = (got[n].double() - leaves[n].detach()).abs().max().item()
            self.assertLess(err, 2e-5, f"{n}: parameters drifted by {err:.2e} after {len(self.data)} steps")


if __name__ == "__main__":
    unittest.main()
