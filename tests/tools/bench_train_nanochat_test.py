"""tools/bench_train.py --family nanochat: its PyTorch nanochat (tools/bench_nanochat_torch.py)
computes the loss of the float64 reference written from nanochat's definition
(tests/py/train/decoder_reference.py) on the same weights, and a one-round benchmark trains
both sides (nfn's trainer, PyTorch's modes) to finite losses and reports them in its JSON."""
import json
import math
import os
import subprocess
import sys
import unittest

import torch

TOOLS = os.path.dirname(os.path.abspath(os.environ["NFN_BENCH_TRAIN"]))
sys.path.insert(0, TOOLS)
import bench_nanochat_torch  # noqa: E402
from decoder_reference import nanochat_loss  # noqa: E402


class ModelTest(unittest.TestCase):
    def test_loss_matches_the_float64_reference(self):
        L, NH, NKV, C, T, V = 4, 4, 2, 64, 24, 100  # GQA, a padded vocabulary, windows of 6
        torch.manual_seed(0)
        model = bench_nanochat_torch.build_model(torch, L, NH, NKV, C, T, V, "SL").double()
        with torch.no_grad():  # every weight nonzero, so each path counts
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
        idx, targets = torch.randint(0, V, (2, T)), torch.randint(0, V, (2, T))
        p = {"transformer.wte.weight": model.wte.weight, "lm_head.weight": model.lm_head.weight,
             "smear_gate.weight": model.smear_gate.weight, "smear_lambda": model.smear_lambda,
             "backout_lambda": model.backout_lambda, "resid_lambdas": model.resid_lambdas,
             "x0_lambdas": model.x0_lambdas}
        for i, b in enumerate(model.blocks):
            pre = f"transformer.h.{i}."
            for name, mod in (("attn.c_q", b.c_q), ("attn.c_k", b.c_k), ("attn.c_v", b.c_v),
                              ("attn.c_proj", b.c_proj), ("mlp.c_fc", b.c_fc), ("mlp.c_proj", b.fc_proj)):
                p[pre + name + ".weight"] = mod.weight
            if b.ve_gate is not None:
                p[pre + "attn.ve_gate.weight"] = b.ve_gate.weight
                p[f"value_embeds.{i}.weight"] = model.value_embeds[str(i)].weight
        self.assertEqual(sorted(model.value_embeds), ["1", "3"])  # alternating, the last always
        cfg = {"num_layers": L, "num_heads": NH, "num_kv_heads": NKV, "head_dim": C // NH, "max_seq_len": T,
               "window_pattern": "SL", "vocab_size": V}
        want = nanochat_loss(p, idx, targets, cfg).item() / targets.numel()
        self.assertAlmostEqual(model(idx, targets).item(), want, delta=1e-6 * abs(want))

    def test_muon_adamw_steps_every_parameter(self):
        torch.manual_seed(0)
        model = bench_nanochat_torch.build_model(torch, 2, 2, 2, 64, 16, 64, "SL")
        opt = bench_nanochat_torch.MuonAdamW(torch, model, torch.float32, channels=64)
        with torch.no_grad():  # no zero weight or lambda that would leave another's gradient 0
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
        before = [p.detach().clone() for p in model.parameters()]
        model(torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))).backward()
        opt.step()
        opt.zero_grad()
        moved = [not torch.equal(a, p) for a, p in zip(before, model.parameters())]
        names = [n for n, _ in model.named_parameters()]
        self.assertEqual([n for n, m in zip(names, moved) if not m], [])
        self.assertTrue(all(p.grad is None for p in model.parameters()))


class BenchTest(unittest.TestCase):
    def test_one_round_trains_both_sides(self):
        argv = [os.environ["NFN_BENCH_TRAIN"], "--family", "nanochat", "--backend", "cpu",
                "--trainer", os.environ["NFN_NANOCHAT_TRAINER"], "--steps", "2", "--rounds", "1",
                "--timeout", "240", "--json"]
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        result = json.loads(proc.stdout)
        self.assertEqual(result["family"], "nanochat")
        self.assertEqual(result["geometry"], {"layers": 4, "heads": 2, "kv_heads": 2, "channels": 256,
                                              "seq_len": 256, "batch_size": 8, "vocab": 1024,
                                              "window_pattern": "SSSL"})
        self.assertIsInstance(result["cpu"]["model"], str)
        self.assertIsInstance(result["cpu"]["features"], list)
        nfn = result["nfn"]["modes"]["matmul_default"]
        self.assertTrue(math.isfinite(nfn["final_loss"]), nfn)
        self.assertIn(nfn["matmul"], ("f32", "bf16"))
        ref = result["pytorch"]["modes"]
        self.assertEqual(sorted(ref), ["compiled_fp32", "eager_bf16", "eager_fp32"])
        for mode in ("eager_fp32", "eager_bf16"):
            self.assertTrue(math.isfinite(ref[mode]["final_loss"]), ref[mode])
        # Compilation may be skipped on a slow host, but then with its reason.
        compiled = ref["compiled_fp32"]
        self.assertTrue(math.isfinite(compiled["final_loss"]) if "error" not in compiled else compiled["error"])
        best = max(r["tokens_per_s"] for r in ref.values() if "tokens_per_s" in r)
        self.assertEqual(result["pytorch"]["tokens_per_s"], best)
        self.assertAlmostEqual(result["ratio"], result["nfn"]["tokens_per_s"] / best)


if __name__ == "__main__":
    unittest.main()
