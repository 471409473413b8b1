"""`nfn kernels bench`: the real nfn_kernels_bench on the real CPU library and on the CUDA
library's kernels under the emulator. Every op with data work gets a row per shape; each row's
FLOPs or bytes are checked against counts derived here from the shapes, its rate against its
time; the peak is none on the CPU and for a GPU the datasheet table does not name; bad input is
one line and exit 1. Checks the tool, not speed."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from nfn.kernels import bench, registry
from nfn_probe import PY_ROOT, PROBE

CUDA_LIB = "libnfn_native_train_tile_ops.so"
CPU_LIB = "libnfn_native_train_cpu_ops.so"
# Ops with no data work to time: allocation, graph and event ops.
UNTIMED = {"alloc", "free", "alloc_host", "free_host", "graph_begin", "graph_end", "graph_launch", "graph_free",
           "event_create", "event_record", "event_query", "event_wait", "event_free", "event_elapsed"}
TINY = {"L": 1, "NH": 2, "C": 128, "T": 64, "B": 2, "vocab": 512, "Vp": 512}


def cpuinfo_model():
    with open("/proc/cpuinfo") as f:
        return next((line.partition(":")[2].strip() for line in f if line.startswith("model name")), "")


def expected_flops(s):
    """op, variant -> FLOPs of one call at shape s: 2 m n k a GEMM, the backward two GEMMs,
    causal attention half the T x T scores (q k^T and p v), windowed attention the scores its
    queries see, the LM head's three GEMMs."""
    N, C, T, hd = s["B"] * s["T"], s["C"], s["T"], s["C"] // s["NH"]
    gemm = lambda m, n, k: 2 * m * n * k
    shapes = {"qkv": (C, 3 * C), "proj": (C, C), "fc": (C, 4 * C), "fcproj": (4 * C, C)}
    out = {("linear_forward", f"{name}{suffix} {ic}->{oc}"): gemm(N, oc, ic)
           for (name, (ic, oc)), suffix in zip(shapes.items(), ("", "+residual", "+gelu", "+residual"))}
    out.update({("linear_backward", name + ("+gelu" if name == "fcproj" else "")): 2 * gemm(N, oc, ic)
                for name, (ic, oc) in shapes.items()})
    attention = s["B"] * s["NH"] * 2 * (T * T / 2) * hd * 2
    out[("attention_forward", "")] = attention
    out[("attention_backward", "")] = 2 * attention
    # Grouped-query heads (NH/4 kv heads) under a window of T/4: the scores each query sees.
    nkv, w = (s["NH"] // 4 if s["NH"] % 4 == 0 else 1), max(1, T // 4)
    windowed = s["B"] * s["NH"] * 2 * sum(min(t, w) + 1 for t in range(T)) * hd * 2
    out[("attention_forward", f"GQA {s['NH']}:{nkv} window {w}")] = windowed
    out[("attention_backward", f"GQA {s['NH']}:{nkv} window {w}")] = 2 * windowed
    out[("lm_head_cross_entropy", "(+backward)")] = 3 * gemm(N, s["Vp"], C)
    out[("lm_head_cross_entropy", "weighted (+backward)")] = 3 * gemm(N, s["Vp"], C)
    return out


def expected_bytes(s, e):
    """op, variant -> bytes one call must read or write, at shape s and e bytes an element."""
    N, C, T = s["B"] * s["T"], s["C"], s["T"]
    NC = N * C
    params = s["Vp"] * C + T * C + s["L"] * (12 * C * C + 13 * C) + 2 * C
    distinct = len({(i * 2654435761) % 2**32 % s["vocab"] for i in range(N)})  # the spread ids
    return {
        ("fill", ""): e * NC, ("copy", "device to device"): 2 * e * NC, ("copy", "host to device"): e * NC,
        ("convert", "f32->bf16"): 6 * NC, ("widen_tokens", ""): 6 * N,
        ("embedding_forward", ""): e * (NC + distinct * C + T * C) + 4 * N,
        ("layernorm_forward", ""): e * (2 * NC + 2 * C) + 8 * N,
        ("gelu_forward", ""): e * 2 * 4 * NC, ("gelu_backward", ""): e * 3 * 4 * NC,
        ("residual_forward", ""): e * (3 * NC + C),
        ("sum_squares_many", ""): e * params + 4,
        ("adamw_step_many", ""): params * (24 + e + (e if e == 2 else 0)) + 4,
    }


class BenchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        # The benchmark alone in a folder of its own: no op library beside it, no runfiles, so
        # it finds only what NFN_TILE_OPS_DIR holds.
        self.bin = os.path.join(self.tmp.name, "bin")
        self.libs = os.path.join(self.tmp.name, "libs")
        os.makedirs(self.bin)
        os.makedirs(self.libs)
        shutil.copy(os.environ["NFN_KERNELS_BENCH"], os.path.join(self.bin, bench.BENCH))

    def tearDown(self):
        self.tmp.cleanup()

    def library(self, name, source_env):
        shutil.copy(os.environ[source_env], os.path.join(self.libs, name))

    def nfn(self, *args):
        """(exit code, stdout, stderr) of `nfn kernels bench ARGS` with only the test's folders."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": PY_ROOT,
               "NFN_TILE_OPS_DIR": self.libs, "NFN_NATIVE_BIN_DIR": self.bin}
        proc = subprocess.run([sys.executable, "-c", PROBE, "kernels", "bench", *args], capture_output=True,
                              text=True, env=env, timeout=300)
        return proc.returncode, proc.stdout.partition("\n@@MODULES@@")[0], proc.stderr

    def report(self, *args):
        code, out, err = self.nfn(*args, "--json")
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def check_counts(self, r, shape, e):
        flops, nbytes = expected_flops(shape), expected_bytes(shape, e)
        rows = {(row["op"], row["variant"]): row for row in r["rows"] if row["shape"] == shape["name"]}
        ops = {op for op, _ in rows}
        for key, want in flops.items():
            if key[0] in ops:  # every variant of a benchmarked op is there
                self.assertAlmostEqual(rows[key]["flops"], want, delta=want * 1e-12, msg=key)
                self.assertEqual(rows[key]["unit"], "GFLOP/s", key)
        for key, want in nbytes.items():
            if key[0] in ops:
                self.assertEqual(rows[key]["bytes"], want, key)
                self.assertEqual((rows[key]["flops"], rows[key]["unit"]), (0, "GB/s"), key)
        for key, row in rows.items():
            self.assertGreater(row["median_ms"], 0, key)
            self.assertLessEqual(row["min_ms"], row["median_ms"], key)
            work = row["flops"] if row["unit"] == "GFLOP/s" else row["bytes"]
            self.assertAlmostEqual(row["rate"], work / (row["median_ms"] * 1e-3) / 1e9, delta=row["rate"] * 1e-9)

    def test_cpu_library_every_op_with_counts(self):
        self.library(CPU_LIB, "NFN_CPU_OPS_LIB")
        r = self.report("--device", "cpu", "--shapes", "tiny", "--iterations", "1", "--configure", "threads=1")
        self.assertEqual((r["backend"], r["dtype"], r["iterations"]), ("cpu", "f32", 1))
        self.assertEqual(r["library"], os.path.join(self.libs, CPU_LIB))
        self.assertEqual(r["device"], cpuinfo_model())
        self.assertEqual(r["host"]["model"], cpuinfo_model())
        self.assertEqual(r["configure"], {"threads": "1"})
        self.assertEqual(r["shapes"], [dict(TINY, name="tiny")])
        ops = [op["name"] for op in registry.load()["ops"]]
        category = {op["name"]: op["category"] for op in registry.load()["ops"]}
        self.assertEqual({row["op"] for row in r["rows"]}, set(ops) - UNTIMED)
        # nfn_ops.def's order, so a category's rows stay together.
        self.assertEqual([row["op"] for row in r["rows"]], sorted((row["op"] for row in r["rows"]), key=ops.index))
        for row in r["rows"]:
            self.assertEqual(row["category"], category[row["op"]])
        self.check_counts(r, dict(TINY, name="tiny"), 4)
        self.assertEqual((r["peak"]["compute_gflops"], r["peak"]["memory_gbps"]), (None, None))
        self.assertIn("none for CPUs", r["peak"]["basis"])
        self.assertTrue(all(row["peak_fraction"] is None for row in r["rows"]))

    def test_ops_and_micro_batches(self):
        self.library(CPU_LIB, "NFN_CPU_OPS_LIB")
        r = self.report("--device", "cpu", "--ops", "linear_forward,gelu_forward", "--shapes", "tiny:1,tiny",
                        "--iterations", "1")
        self.assertEqual([(s["name"], s["B"]) for s in r["shapes"]], [("tiny:1", 1), ("tiny", 2)])
        self.assertEqual({row["op"] for row in r["rows"]}, {"linear_forward", "gelu_forward"})
        self.assertEqual(len(r["rows"]), 2 * 5)  # four linears and the GELU, at each micro-batch
        self.check_counts(r, dict(TINY, name="tiny:1", B=1), 4)
        self.check_counts(r, dict(TINY, name="tiny"), 4)

    def test_cuda_library_under_the_emulator(self):
        self.library(CUDA_LIB, "NFN_EMULATED_CUDA_OPS_LIB")
        r = self.report("--device", "cuda", "--shapes", "tiny", "--iterations", "1")
        self.assertEqual((r["backend"], r["device"], r["dtype"]), ("cuda", "nfn CUDA emulator", "bf16"))
        self.assertEqual({row["op"] for row in r["rows"]}, {op["name"] for op in registry.load()["ops"]} - UNTIMED)
        self.check_counts(r, dict(TINY, name="tiny"), 2)
        self.assertEqual((r["peak"]["compute_gflops"], r["peak"]["memory_gbps"]), (None, None))
        self.assertEqual(r["peak"]["basis"], "nfn CUDA emulator is not in the datasheet table (cc/train/mfu.h)")

    def test_text_report(self):
        self.library(CPU_LIB, "NFN_CPU_OPS_LIB")
        code, out, err = self.nfn("--device", "cpu", "--ops", "linear_backward", "--shapes", "tiny",
                                  "--iterations", "1")
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], f"library  cpu: {os.path.join(self.libs, CPU_LIB)}")
        self.assertEqual(lines[1], f"device   {cpuinfo_model() or 'unknown'}; f32 storage")
        self.assertTrue(lines[2].startswith(f"host     {cpuinfo_model()} ("), lines[2])
        self.assertTrue(lines[3].startswith("peak     none for CPUs"), lines[3])
        self.assertEqual(lines[4], "shapes   tiny L1 NH2 C128 T64 B2 V512")
        header = lines[lines.index("") + 1]
        self.assertEqual(header.split(), ["shape", "op", "category", "variant", "median", "ms", "rate", "unit",
                                          "%", "peak"])
        rows = [line.split() for line in lines[lines.index("") + 2:]]
        self.assertEqual([row[3] for row in rows], ["qkv", "proj", "fc", "fcproj+gelu"])
        for row in rows:
            self.assertEqual((row[0], row[1], row[2], row[6], row[7]), ("tiny", "linear_backward", "linear",
                                                                        "GFLOP/s", "-"))

    def test_bad_input_is_one_line(self):
        self.library(CPU_LIB, "NFN_CPU_OPS_LIB")
        cases = [
            (["--ops", "linear_forwrd"], "unknown op 'linear_forwrd'"),
            (["--ops", "graph_begin"], "op 'graph_begin' is not benchmarked"),
            (["--iterations", "0"], "--iterations 0: expected a count of at least 1"),
            (["--shapes", "huge"], "unknown shape 'huge'"),
            (["--device", "cuda"], f"no {CUDA_LIB}"),
            (["--device", "cpu", "--configure", "warp=9"], "warp"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                code, out, err = self.nfn(*args)
                self.assertEqual(code, 1, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertTrue(err.startswith("nfn kernels: error: "), err)
                self.assertIn(text, err)
                self.assertEqual(out.strip(), "")


class RatesTest(unittest.TestCase):
    def test_fractions_of_a_datasheet_peak(self):
        # A GPU report as the native benchmark writes it: a compute row against the bf16 peak, a
        # memory row against the bandwidth, a host copy against nothing.
        r = {"peak": {"compute_gflops": 989400.0, "memory_gbps": 4800.0, "basis": "b"}, "rows": [
            {"op": "linear_forward", "flops": 2e12, "bytes": 0, "host_link": False, "median_ms": 4.0},
            {"op": "fill", "flops": 0, "bytes": 2.4e9, "host_link": False, "median_ms": 1.0},
            {"op": "copy", "flops": 0, "bytes": 5e8, "host_link": True, "median_ms": 10.0}]}
        rows = bench.add_rates(r)["rows"]
        self.assertEqual([row["unit"] for row in rows], ["GFLOP/s", "GB/s", "GB/s"])
        for row, rate in zip(rows, (500000, 2400, 50)):
            self.assertAlmostEqual(row["rate"], rate, delta=rate * 1e-12)
        self.assertAlmostEqual(rows[0]["peak_fraction"], 500000 / 989400)
        self.assertAlmostEqual(rows[1]["peak_fraction"], 0.5)
        self.assertIsNone(rows[2]["peak_fraction"])
        r["peak"]["compute_gflops"] = None  # f32 storage: no compute peak
        self.assertIsNone(bench.add_rates(r)["rows"][0]["peak_fraction"])


if __name__ == "__main__":
    unittest.main()
