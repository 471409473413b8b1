"""muon_step_many (the CPU op library) against a float64 PyTorch Muon written here.

The reference is nanochat's Muon (optim.py, MuonAdamW's matrix groups) without NorMuon,
MuonEq, Muon+ or cautious weight decay: lerp momentum, Nesterov lerp, normalization by
1.01 ||u||_F + 1e-6, Polar Express steps with nanochat's coefficients (the Gram matrix of the
smaller side), lr scaled by sqrt(max(1, rows/cols)), decoupled weight decay.
"""
import ctypes
import os
import unittest

import numpy as np
import torch
from muon_reference import reference_step

NFN_OK, NFN_ERR_INVALID_ARGUMENT = 0, 1
NFN_F32, NFN_BF16 = 0, 1


class MuonGroup(ctypes.Structure):
    _fields_ = [("master", ctypes.c_void_p), ("param", ctypes.c_void_p), ("grad", ctypes.c_void_p),
                ("momentum", ctypes.c_void_p), ("rows", ctypes.c_int), ("cols", ctypes.c_int)]



def to_bf16_bits(a):
    return (torch.from_numpy(a).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)).copy()


def from_bf16_bits(b):
    return torch.from_numpy(b.view(np.int16)).view(torch.bfloat16).float().numpy()


class MuonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = ctypes.CDLL(os.environ["NFN_CPU_OPS_LIB"])
        cls.lib.nfn_muon_step_many.argtypes = [ctypes.c_void_p, ctypes.POINTER(MuonGroup), ctypes.c_int,
                                               ctypes.c_float, ctypes.c_float, ctypes.c_int, ctypes.c_int,
                                               ctypes.c_float, ctypes.c_int]
        cls.lib.nfn_ctx_last_error.restype = ctypes.c_char_p
        cls.lib.nfn_ctx_last_error.argtypes = [ctypes.c_void_p]
        cls.ctx = ctypes.c_void_p()
        assert cls.lib.nfn_ctx_create(0, ctypes.byref(cls.ctx)) == NFN_OK

    def step(self, groups, lr, beta, nesterov, ns_steps, wd, dtype=NFN_F32):
        arr = (MuonGroup * len(groups))(*groups)
        return self.lib.nfn_muon_step_many(self.ctx, arr, len(groups), lr, beta, nesterov, ns_steps, wd, dtype)

    def run_steps(self, shapes, dtype, steps=3, lr=0.02, beta=0.95, nesterov=1, ns_steps=5, wd=0.1):
        """Runs `steps` steps of the op and of the reference on one group per shape; returns,
        per shape, the op's and the reference's total change of p, and both momentum buffers."""
        rng = np.random.default_rng(7)
        state = []
        for rows, cols in shapes:
            p = rng.standard_normal((rows, cols)).astype(np.float32) * 0.1
            state.append(dict(p=p, p0=p.copy(), m=np.zeros_like(p), ref_p=torch.from_numpy(p).double(),
                              ref_m=torch.zeros(rows, cols, dtype=torch.float64),
                              param=np.zeros((rows, cols), np.uint16 if dtype == NFN_BF16 else np.float32)))
        for _ in range(steps):
            groups = []
            for s in state:
                g = rng.standard_normal(s["p"].shape).astype(np.float32) * 0.01
                if dtype == NFN_BF16:
                    s["grad"] = to_bf16_bits(g)
                    g = from_bf16_bits(s["grad"])
                else:
                    s["grad"] = g
                s["ref_p"], s["ref_m"], _ = reference_step(s["ref_p"], s["ref_m"], torch.from_numpy(g).double(),
                                                           lr, beta, nesterov, ns_steps, wd)
                groups.append(MuonGroup(s["p"].ctypes.data, s["param"].ctypes.data, s["grad"].ctypes.data,
                                        s["m"].ctypes.data, *s["p"].shape))
            self.assertEqual(self.step(groups, lr, beta, nesterov, ns_steps, wd, dtype), NFN_OK,
                             self.lib.nfn_ctx_last_error(self.ctx))
        return state

    def check(self, state, dtype, update_bound):
        for s in state:
            got = torch.from_numpy(s["p"] - s["p0"]).double()
            want = s["ref_p"] - torch.from_numpy(s["p0"]).double()
            err = ((got - want).norm() / want.norm()).item()
            self.assertLess(err, update_bound, f"{s['p'].shape} update relative error")
            m_err = ((torch.from_numpy(s["m"]).double() - s["ref_m"]).norm() / s["ref_m"].norm()).item()
            self.assertLess(m_err, 1e-6, f"{s['p'].shape} momentum relative error")
            copy = from_bf16_bits(s["param"]) if dtype == NFN_BF16 else s["param"]
            np.testing.assert_allclose(copy, s["p"], rtol=2 ** -8 if dtype == NFN_BF16 else 0, atol=0)

    SHAPES = [(64, 64), (96, 40), (40, 96), (7, 33)]

    def test_f32_matches_reference(self):
        # f32 GEMMs through five quintic steps whose coefficients reach |22|: each step
        # amplifies the relative rounding error (~1e-7) by at most about the coefficients' sum,
        # which leaves 1e-4 of the update at the end; measured 2e-6 to 4e-6.
        self.check(self.run_steps(self.SHAPES, NFN_F32), NFN_F32, 1e-4)

    def test_f32_without_nesterov_or_iteration(self):
        self.check(self.run_steps(self.SHAPES, NFN_F32, nesterov=0, ns_steps=0, wd=0.0), NFN_F32, 1e-5)
        self.check(self.run_steps(self.SHAPES, NFN_F32, nesterov=0, ns_steps=2), NFN_F32, 1e-4)

    def test_bf16_matches_reference(self):
        # X, A and P rounded to bf16 (8 bits, 4e-3 relative) before every GEMM, as nanochat runs
        # the iteration: the update follows the float64 one to a few percent (measured 1e-2 to
        # 4e-2, the most on the 7 x 33 group, whose few singular values each carry more of it).
        self.check(self.run_steps(self.SHAPES, NFN_BF16), NFN_BF16, 5e-2)

    def test_update_is_nearly_orthogonal(self):
        # With lr 1 and no weight decay, the change of p is the orthogonalized update X itself.
        # Its singular values after 5 Polar Express steps lie in about [0.86, 1.14] for a
        # spectrum spread down to 1/20 of its largest value (the reference gives that band).
        rng = np.random.default_rng(3)
        for rows, cols in [(48, 48), (80, 32), (32, 80)]:
            k = min(rows, cols)
            u, _ = np.linalg.qr(rng.standard_normal((rows, k)))
            v, _ = np.linalg.qr(rng.standard_normal((cols, k)))
            g = (u * np.linspace(0.05, 1.0, k)) @ v.T
            g = g.astype(np.float32)
            p = np.zeros((rows, cols), np.float32)
            m = np.zeros_like(p)
            group = MuonGroup(p.ctypes.data, None, g.ctypes.data, m.ctypes.data, rows, cols)
            self.assertEqual(self.step([group], 1.0, 0.0, 0, 5, 0.0), NFN_OK)
            x = -p / max(1.0, rows / cols) ** 0.5
            s = np.linalg.svd(x.astype(np.float64), compute_uv=False)
            self.assertGreater(s.min(), 0.8, (rows, cols))
            self.assertLess(s.max(), 1.16, (rows, cols))

    def test_bad_arguments(self):
        p = np.zeros((4, 4), np.float32)
        ok = dict(master=p.ctypes.data, param=None, grad=p.ctypes.data, momentum=p.ctypes.data, rows=4, cols=4)
        cases = [
            (dict(ok, rows=0), {}, "rows and cols must be positive"),
            (dict(ok, cols=-3), {}, "rows and cols must be positive"),
            (dict(ok, grad=None), {}, "null master, grad or momentum"),
            (dict(ok, momentum=None), {}, "null master, grad or momentum"),
            (ok, dict(ns_steps=-1), "ns_steps=-1 must lie in [0, 5]"),
            (ok, dict(ns_steps=6), "ns_steps=6 must lie in [0, 5]"),
            (ok, dict(beta=1.0), "momentum 1 must lie in [0, 1)"),
        ]
        for fields, args, message in cases:
            kw = dict(lr=0.02, beta=0.95, nesterov=1, ns_steps=5, wd=0.0)
            kw.update(args)
            status = self.step([MuonGroup(**fields)], **kw)
            self.assertEqual(status, NFN_ERR_INVALID_ARGUMENT, message)
            error = self.lib.nfn_ctx_last_error(self.ctx).decode()
            self.assertTrue(error.startswith("muon_step_many: ") and message in error, error)
        status = self.lib.nfn_muon_step_many(self.ctx, None, 1, 0.02, 0.95, 1, 5, 0.0, NFN_F32)
        self.assertEqual(status, NFN_ERR_INVALID_ARGUMENT)
        self.assertIn("null groups", self.lib.nfn_ctx_last_error(self.ctx).decode())


if __name__ == "__main__":
    unittest.main()
