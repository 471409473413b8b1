"""LoRA on the modern decoder against float64 PyTorch: the native model with adapters over a
frozen base gives the loss and adapter gradients of the reference model whose matrices are
W + (alpha/rank) B A (the fused q/k/v and gate/up matrices adapted as one, split back into their
parts); with B at zero it is the base model exactly; over a quantized base (QLoRA) it matches
the reference on the dequantized base; one optimizer step is torch's AdamW on the adapters; the
merged model (W + (alpha/rank) B A written into the base) scores as the adapted one."""
import unittest

import numpy as np
import torch

from nfn import _native
from decoder_reference import llama_loss, nanochat_loss, random_weights, split

NANOCHAT = dict(family="nanochat", max_seq_len=16, vocab_size=61, padded_vocab_size=64, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=8, channels=32, hidden=128, window_pattern="SL")
LLAMA = dict(family="llama", max_seq_len=16, vocab_size=61, padded_vocab_size=61, num_layers=2, num_heads=4,
             num_kv_heads=2, head_dim=8, channels=32, hidden=64, rope_theta=10000.0, norm_eps=1e-6,
             tied_head=False, window_pattern="L")
B, T = 2, 16
# Each adapted matrix and the base tensors it spans, in row order.
PARTS = {
    "llama": {"self_attn.qkv_proj": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
              "self_attn.o_proj": ["self_attn.o_proj"], "mlp.gate_up_proj": ["mlp.gate_proj", "mlp.up_proj"],
              "mlp.down_proj": ["mlp.down_proj"]},
    "nanochat": {"attn.c_qkv": ["attn.c_q", "attn.c_k", "attn.c_v"], "attn.c_proj": ["attn.c_proj"],
                 "mlp.c_fc": ["mlp.c_fc"], "mlp.c_proj": ["mlp.c_proj"]},
}
MATRICES = {part for parts in PARTS["llama"].values() for part in parts} | \
    {part for parts in PARTS["nanochat"].values() for part in parts}


def native(cfg, **lora):
    return _native.NativeDecoder(**cfg, **lora)


def quantized_base(base, layout, qtype):
    """The base as a QLoRA run holds it: each block matrix (32 columns a block) through the quantizer."""
    out = base.copy()
    for name, rows, cols, offset in layout:
        if ".".join(name.split(".")[-3:-1]) in MATRICES and cols % 32 == 0:
            block = base[offset:offset + rows * cols]
            out[offset:offset + rows * cols] = _native.dequantize(_native.quantize(block, qtype), qtype)
    return out


def reference(cfg, base, base_layout, adapters, lora_layout, scale, inputs, targets):
    """(loss, {adapter name: gradient}) of the reference with adapted matrices."""
    p = split(torch.tensor(base, dtype=torch.float64), base_layout)
    flat = torch.tensor(adapters, dtype=torch.float64, requires_grad=True)
    a = split(flat, lora_layout)
    for name, _, _, _ in lora_layout:
        if not name.endswith("lora_A.weight"):
            continue
        prefix = name[:-len("lora_A.weight")]
        layer, target = ".".join(prefix.split(".")[:3]) + ".", ".".join(prefix.split(".")[3:-1])
        if cfg["family"] == "nanochat":
            layer, target = ".".join(prefix.split(".")[:3]) + ".", ".".join(prefix.split(".")[3:-1])
        delta = scale * a[prefix + "lora_B.weight"] @ a[prefix + "lora_A.weight"]
        row = 0
        for part in PARTS[cfg["family"]][target]:
            key = layer + part + ".weight"
            rows = p[key].shape[0]
            p[key] = p[key] + delta[row:row + rows]
            row += rows
        assert row == delta.shape[0], name
    fn = nanochat_loss if cfg["family"] == "nanochat" else llama_loss
    loss = fn(p, torch.tensor(inputs).long(), torch.tensor(targets).long(), cfg)
    loss.backward()
    return loss.item(), split(flat.grad, lora_layout)


class LoraParityTest(unittest.TestCase):
    def batch(self, cfg, seed):
        rng = np.random.default_rng(seed)
        tokens = rng.integers(0, cfg["vocab_size"], size=(B, T + 1)).astype(np.int32)
        return tokens[:, :-1].copy(), tokens[:, 1:].copy()

    def check(self, cfg, rank, alpha, targets, quant=""):
        rng = np.random.default_rng(7)
        full = native(cfg)
        base_layout = full.layout()
        base = random_weights(base_layout, rng)
        model = native(cfg, lora_rank=rank, lora_alpha=alpha, lora_targets=targets, lora_quant=quant)
        lora_layout = model.layout()
        kinds = {".".join(n.split(".")[-4:-2]) if cfg["family"] == "llama" else ".".join(n.split(".")[-4:-2])
                 for n, _, _, _ in lora_layout}
        want_kinds = {"all": set(PARTS[cfg["family"]]), "attn": set(list(PARTS[cfg["family"]])[:2]),
                      "mlp": set(list(PARTS[cfg["family"]])[2:])}[targets]
        self.assertEqual(kinds, want_kinds)
        adapters = (rng.standard_normal(model.num_parameters) * 0.3).astype(np.float32)
        model.set_base(base)
        model.set_parameters(adapters)
        inputs, targets_ = self.batch(cfg, 3)
        model.zero_grads()
        loss = model.forward_backward(inputs, targets_, True, 1.0)
        grads = split(torch.tensor(model.gradients()), lora_layout)
        held = quantized_base(base, base_layout, quant) if quant else base
        want, ref = reference(cfg, held, base_layout, adapters, lora_layout, alpha / rank, inputs, targets_)
        self.assertAlmostEqual(loss, want, delta=2e-5 * abs(want))
        for name, _, _, _ in lora_layout:
            scale = ref[name].abs().max().item()
            self.assertGreater(scale, 0, name)
            err = (grads[name].double() - ref[name]).abs().max().item() / scale
            self.assertLess(err, 2e-4, f"{name}: max relative gradient error {err:.2e}")
        return model, base, adapters, lora_layout

    def test_llama_all_targets(self):
        self.check(LLAMA, 4, 8.0, "all")

    def test_nanochat_attention_targets(self):
        self.check(NANOCHAT, 2, 4.0, "attn")

    def test_llama_mlp_over_a_quantized_base(self):
        for quant in ("q4_1", "nf4"):
            self.check(LLAMA, 3, 3.0, "mlp", quant)

    def test_zero_b_is_the_base_model(self):
        for cfg in (NANOCHAT, LLAMA):
            rng = np.random.default_rng(1)
            full = native(cfg)
            base = random_weights(full.layout(), rng)
            full.set_parameters(base)
            model = native(cfg, lora_rank=4, lora_alpha=4.0)
            adapters = np.zeros(model.num_parameters, dtype=np.float32)
            for name, rows, cols, offset in model.layout():
                if name.endswith("lora_A.weight"):
                    adapters[offset:offset + rows * cols] = rng.standard_normal(rows * cols)
            model.set_base(base)
            model.set_parameters(adapters)
            inputs, targets = self.batch(cfg, 5)
            self.assertEqual(model.forward_backward(inputs, targets, False, 1.0),
                             full.forward_backward(inputs, targets, False, 1.0))

    def test_one_adamw_step_on_the_adapters(self):
        model, base, adapters, layout = self.check(LLAMA, 2, 4.0, "attn")
        grads = model.gradients()
        model.optimizer_step(1, 1e-2, 0.9, 0.95, 1e-8, 0.1, 0.0)
        w = torch.tensor(adapters, dtype=torch.float32, requires_grad=True)
        w.grad = torch.tensor(grads)
        torch.optim.AdamW([w], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1).step()
        np.testing.assert_allclose(model.parameters(), w.detach().numpy(), rtol=1e-5, atol=1e-7)

    def test_merged_model_is_the_adapted_model(self):
        for cfg, quant in ((LLAMA, ""), (NANOCHAT, "q8_0")):
            model, base, _, _ = self.check(cfg, 3, 6.0, "all", quant)
            full = native(cfg)
            full.set_parameters(model.merged(base))
            inputs, targets = self.batch(cfg, 3)
            want = model.forward_backward(inputs, targets, False, 1.0)
            self.assertAlmostEqual(full.forward_backward(inputs, targets, False, 1.0), want, delta=1e-5 * abs(want))

    def test_bad_spec(self):
        with self.assertRaisesRegex(RuntimeError, "LoRA alpha must be positive"):
            native(LLAMA, lora_rank=2, lora_alpha=0.0)
        with self.assertRaisesRegex(ValueError, "lora_targets: all, attn or mlp"):
            native(LLAMA, lora_rank=2, lora_alpha=1.0, lora_targets="head")
        model = native(LLAMA, lora_rank=2, lora_alpha=1.0)
        inputs, targets = self.batch(LLAMA, 1)
        with self.assertRaisesRegex(RuntimeError, "no base weights yet"):
            model.forward_backward(inputs, targets, False, 1.0)
        with self.assertRaisesRegex(RuntimeError, "base parameters: got 3 values"):
            model.set_base(np.zeros(3, dtype=np.float32))


if __name__ == "__main__":
    unittest.main()
