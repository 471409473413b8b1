"""The native modern decoder (CPU op library, f32) against float64 PyTorch references written
in decoder_reference.py: for nanochat (GQA, sliding windows, value embeddings, smear, backout,
lambdas, QK-norm, soft-capped head) and llama (GQA, SwiGLU, weighted norms, tied and untied
heads), the same weights and batch give the same summed loss and every gradient tensor within
fp32 tolerance; one optimizer step is nanochat's MuonAdamW (Muon for the block matrices, AdamW
with each group's learning rate, betas and decay for the rest), and nanochat's initialisation
follows its init_weights."""
import unittest

import numpy as np
import torch

from nfn import _native
from decoder_reference import llama_loss, nanochat_loss, random_weights, split
from muon_reference import reference_step

NANOCHAT = dict(family="nanochat", max_seq_len=16, vocab_size=61, padded_vocab_size=64, num_layers=4,
                num_heads=4, num_kv_heads=2, head_dim=8, channels=32, hidden=128, window_pattern="SSSL")
LLAMA = dict(family="llama", max_seq_len=16, vocab_size=61, padded_vocab_size=61, num_layers=2, num_heads=4,
             num_kv_heads=1, head_dim=8, channels=24, hidden=40, rope_theta=10000.0, norm_eps=1e-6,
             tied_head=False, window_pattern="L")
B, T = 3, 16


def native(cfg, muon=True):
    return _native.NativeDecoder(**cfg, muon=muon)


class DecoderParityTest(unittest.TestCase):
    def check_family(self, cfg, reference):
        rng = np.random.default_rng(3)
        model = native(cfg)
        layout = model.layout()
        params = random_weights(layout, rng)
        model.set_parameters(params)
        tokens = rng.integers(0, cfg["vocab_size"], size=(B, T + 1)).astype(np.int32)
        inputs, targets = tokens[:, :-1].copy(), tokens[:, 1:].copy()
        targets[1, 5] = -1  # a masked target adds neither loss nor gradient
        model.zero_grads()
        loss = model.forward_backward(inputs, targets, True, 1.0)
        grads = split(torch.tensor(model.gradients()), layout)

        flat = torch.tensor(params, dtype=torch.float64, requires_grad=True)
        want = reference(split(flat, layout), torch.tensor(inputs).long(), torch.tensor(targets).long(), cfg)
        want.backward()
        self.assertAlmostEqual(loss, want.item(), delta=2e-5 * abs(want.item()))
        ref = split(flat.grad, layout)
        for name, _, _, _ in layout:
            scale = ref[name].abs().max().item()
            self.assertGreater(scale, 0, f"{name}: the reference gradient is zero")
            err = (grads[name].double() - ref[name]).abs().max().item() / scale
            self.assertLess(err, 2e-4, f"{name}: max relative gradient error {err:.2e}")

    def test_nanochat_loss_and_gradients(self):
        self.check_family(NANOCHAT, nanochat_loss)

    def test_llama_loss_and_gradients(self):
        self.check_family(LLAMA, llama_loss)

    def test_llama_tied_head(self):
        self.check_family(dict(LLAMA, tied_head=True), llama_loss)

    def test_nanochat_muon_adamw_step(self):
        """Step 1 (momentum 0.85, bias-corrected AdamW) from the same gradients, at the recipe's
        default learning rates, against torch's AdamW arithmetic and the Muon reference."""
        rng = np.random.default_rng(4)
        model = native(NANOCHAT)
        layout = model.layout()
        params = random_weights(layout, rng)
        model.set_parameters(params)
        tokens = rng.integers(0, NANOCHAT["vocab_size"], size=(B, T + 1)).astype(np.int32)
        model.zero_grads()
        model.forward_backward(tokens[:, :-1].copy(), tokens[:, 1:].copy(), True, 1.0 / (B * T))
        grads = split(torch.tensor(model.gradients()).double(), layout)
        model.optimizer_step(step=1, lr=0.02, lr_factor=1.0)
        got = split(torch.tensor(model.parameters()).double(), layout)
        before = split(torch.tensor(params).double(), layout)
        scale = (NANOCHAT["channels"] / 768) ** -0.5
        adamw = {  # name prefix: (lr, beta1, beta2, weight decay), nanochat's MuonAdamW groups
            "lm_head": (0.004 * scale, 0.8, 0.96, 0.01),
            "transformer.wte": (0.3 * scale, 0.8, 0.995, 0.001),
            "value_embeds": (0.3 * scale * 0.5, 0.8, 0.995, 0.01),
            "resid_lambdas": (0.5 * 0.01, 0.8, 0.95, 0.05),
            "x0_lambdas": (0.5, 0.96, 0.95, 0.0),
            "smear": (0.2, 0.8, 0.95, 0.0),
            "backout": (0.2, 0.8, 0.95, 0.0),
        }
        for name, rows, cols, _ in layout:
            p, g = before[name], grads[name]
            group = [v for k, v in adamw.items() if name.startswith(k)]
            if group:
                lr, b1, b2, wd = group[0]
                m, v = (1 - b1) * g, (1 - b2) * g * g
                want = p * (1 - lr * wd) - lr * (m / (1 - b1)) / ((v / (1 - b2)).sqrt() + 1e-10)
            else:  # a block matrix: Muon at lr 0.02, momentum 0.85 on step 1, Nesterov, 5 steps
                want, _, _ = reference_step(p.view(rows, cols), torch.zeros(rows, cols, dtype=torch.float64),
                                            g.view(rows, cols), 0.02, 0.85, True, 5, 0.0)
                want = want.view_as(p)
            moved = (want - p).abs().max().item()
            self.assertGreater(moved, 0, name)
            err = (got[name] - want).abs().max().item() / moved
            self.assertLess(err, 2e-3, f"{name}: step error {err:.2e} of the largest change")

    def test_nanochat_initialisation(self):
        c = NANOCHAT
        args = [c[k] for k in ("family", "max_seq_len", "vocab_size", "padded_vocab_size", "num_layers",
                               "num_heads", "num_kv_heads", "head_dim", "channels", "hidden")]
        w = _native.decoder_random_parameters(*args, 7)
        p = split(torch.tensor(w), native(c).layout())
        s = (3 / c["channels"]) ** 0.5
        L = c["num_layers"]
        np.testing.assert_allclose(p["resid_lambdas"], [1.15 - 0.10 * i / (L - 1) for i in range(L)], rtol=1e-6)
        np.testing.assert_allclose(p["x0_lambdas"], [0.20 - 0.15 * i / (L - 1) for i in range(L)], rtol=1e-5)
        self.assertEqual(p["smear_lambda"].item(), 0.0)
        self.assertAlmostEqual(p["backout_lambda"].item(), 0.2, places=6)
        for i in range(L):
            self.assertEqual(p[f"transformer.h.{i}.attn.c_proj.weight"].abs().max().item(), 0.0)
            self.assertEqual(p[f"transformer.h.{i}.mlp.c_proj.weight"].abs().max().item(), 0.0)
            q = p[f"transformer.h.{i}.attn.c_q.weight"]
            self.assertLessEqual(q.abs().max().item(), s)
            self.assertAlmostEqual(q.std().item(), s / 3 ** 0.5, delta=0.1 * s)
            fc = p[f"transformer.h.{i}.mlp.c_fc.weight"]
            self.assertLessEqual(fc.abs().max().item(), 0.4 * s)
        self.assertEqual(sorted(k for k in p if k.startswith("value_embeds")),
                         ["value_embeds.1.weight", "value_embeds.3.weight"])
        wte = p["transformer.wte.weight"]
        self.assertAlmostEqual(wte[:c["vocab_size"]].std().item(), 0.8, delta=0.05)
        self.assertEqual(wte[c["vocab_size"]:].abs().max().item(), 0.0)  # padding rows
        self.assertAlmostEqual(p["lm_head.weight"][:c["vocab_size"]].std().item(), 0.001, delta=2e-4)

    def test_bad_geometry(self):
        with self.assertRaisesRegex(ValueError, "num_kv_heads 3 does not divide num_heads 4"):
            native(dict(NANOCHAT, num_kv_heads=3))
        with self.assertRaisesRegex(ValueError, "window_pattern SSXL has a letter other than S"):
            native(dict(NANOCHAT, window_pattern="SSXL"))
        with self.assertRaisesRegex(ValueError, "channels 30 must be num_heads x head_dim"):
            native(dict(NANOCHAT, channels=30))


if __name__ == "__main__":
    unittest.main()
