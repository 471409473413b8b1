"""tools/bench_ops runs on the CPU library and on the CUDA library's kernels under the CUDA
emulator (as tools/device_check.sh runs it on a GPU): every op of a training step gets a row
with a positive time, the header names the backend, storage dtype and geometry, and a bad
library is one line and exit 1. Checks the tool, not speed."""
import os
import re
import subprocess
import unittest

BENCH = os.path.abspath(os.environ["NFN_BENCH_OPS"])
CPU_LIB = os.path.abspath(os.environ["NFN_CPU_OPS_LIB"])
EMULATED_LIB = os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])
OPS = ["embedding_forward", "embedding_backward", "embedding_backward (text-like ids)", "layernorm_forward", "layernorm_backward",
       "layernorm_backward +dinp_colsum",
       "linear_forward qkv 128->384", "linear_forward proj+residual 128->128", "linear_forward fc+gelu 128->512",
       "linear_forward fcproj+residual 512->128", "linear_backward qkv", "linear_backward proj",
       "linear_backward fc", "linear_backward fcproj+gelu", "attention_forward", "attention_backward",
       "lm_head_cross_entropy (+backward)", "sum_squares_many", "adamw_step_many", "calibration: linear 256^3"]
# Muon on one fc weight (4C x C; outside the step total: GPT-2 trains with AdamW).
OPS += ["muon_step_many fc 512x128"]
# The LM head with per-row weights (nfn rl's advantages; outside the step total).
OPS += ["lm_head_cross_entropy weighted (+backward)"]
# Each linear backward's products alone (outside the step total).
OPS += [f"linear_backward {name}: {part}" for name in ("qkv", "proj", "fc", "fcproj+gelu")
        for part in ("dinp", "dweight", "dweight+dbias")]
ROW = re.compile(r"(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+\S*\s+([\d.]+)$")


def bench(*args):
    return subprocess.run([BENCH, "--geometry", "tiny", "--reps", "1", *args], capture_output=True, text=True,
                          timeout=300)


class BenchOpsTest(unittest.TestCase):
    def check_table(self, out, header):
        lines = out.splitlines()
        self.assertEqual(lines[0], header)
        rows = {m.group(1).strip(): m for m in map(ROW.match, lines[2:-1]) if m}
        self.assertEqual(sorted(rows), sorted(OPS))
        for name, m in rows.items():
            self.assertGreater(float(m.group(3)), 0, name)
        calls = {name: int(m.group(2)) for name, m in rows.items()}
        self.assertEqual((calls["layernorm_forward"], calls["layernorm_backward"], calls["layernorm_backward +dinp_colsum"],
                          calls["calibration: linear 256^3"], calls["embedding_backward (text-like ids)"],
                          calls["linear_backward qkv: dinp"], calls["muon_step_many fc 512x128"]),
                         (3, 1, 2, 0, 0, 0, 0))  # 2L + 1 norms at one layer; the others are not step ops
        self.assertTrue(lines[-1].startswith("ops per micro-step: "), lines[-1])

    def test_cpu_library(self):
        proc = bench("--lib", CPU_LIB, "--configure", "threads=1")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.check_table(proc.stdout, f"cpu ({CPU_LIB}), f32 storage, geometry tiny: L1 NH2 C128 T64 B2 V512")

    def test_cuda_library_under_the_emulator(self):
        proc = bench("--lib", EMULATED_LIB, "--dtype", "bf16", "--configure", "attention=flash_mma")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.check_table(proc.stdout, f"cuda ({EMULATED_LIB}), bf16 storage, geometry tiny: L1 NH2 C128 T64 B2 V512")
        # Before the summary: how often the bf16 linears' cuBLASLt epilogues ran fused (all
        # of them under the emulator, whose GEMM has them).
        fused = proc.stdout.splitlines()[-2]
        self.assertRegex(fused, r"^fused epilogues: gelu_aux_bias (\d+)/\1, dgelu (\d+)/\2, dgelu_bgrad (\d+)/\3 fused$")

    def test_lm_head_chunk_sizes(self):
        # --lm-head-rows times the LM head again at each chunk size, outside the step total.
        proc = bench("--lib", EMULATED_LIB, "--dtype", "bf16", "--only", "lm_head", "--lm-head-rows", "8,16")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = {m.group(1).strip(): m for m in map(ROW.match, proc.stdout.splitlines()[2:-1]) if m}
        self.assertEqual(sorted(rows), ["lm_head_cross_entropy (+backward)", "lm_head_cross_entropy rows=16",
                                        "lm_head_cross_entropy rows=8",
                                        "lm_head_cross_entropy weighted (+backward)"])
        self.assertEqual([int(rows[f"lm_head_cross_entropy rows={r}"].group(2)) for r in (8, 16)], [0, 0])
        self.assertEqual(float(rows["lm_head_cross_entropy rows=8"].group(5)), 0.0)  # not in the step's ms
        proc = bench("--lib", EMULATED_LIB, "--dtype", "bf16", "--only", "lm_head", "--lm-head-rows", "12")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("lm_head_rows=12 is not a multiple of 8", proc.stderr)

    def test_bad_input(self):
        proc = bench("--lib", "/nonexistent/lib.so")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("/nonexistent/lib.so", proc.stderr)
        proc = bench("--lib", CPU_LIB, "--configure", "warp=9")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("warp", proc.stderr)
        proc = bench("--geometry", "huge")
        self.assertEqual(proc.returncode, 2)
        self.assertTrue(proc.stderr.startswith("usage: bench_ops"), proc.stderr)


if __name__ == "__main__":
    unittest.main()
