"""tools/bench_train.py --backend cpu (tools/bench_train_cpu.py) holds each side to --timeout, as
the CUDA path does: a trainer run past it and a PyTorch reference past it (at its start, or on
a round's request) are killed and reported as their modes' errors, and the benchmark ends. The
sides are stand-ins written here: a trainer and a reference that hang, and ones that answer at
once, so that a limit that stops what works would show too."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

TOOLS = os.path.dirname(os.path.abspath(os.environ["NFN_BENCH_TRAIN"]))
sys.path.insert(0, TOOLS)
import bench_train  # noqa: E402

MODES = ["eager_fp32", "eager_bf16", "compiled_fp32", "compiled_bf16"]

# A trainer's --json report: 3 warm-up steps and one timed step of 0.5 s (8 x 256 tokens).
TRAINER_OK = """
import json, sys
print(json.dumps({"step_seconds": [1.0, 1.0, 1.0, 0.5], "final_train_loss": 9.0}))
"""
HANG = """
import os, sys, time
with open(os.environ["NFN_TEST_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(3600)
"""
# --serve's protocol: a ready line, then one JSON line per "MODE STEPS" request.
REFERENCE_OK = """
import json, sys
print(json.dumps({"ready": %r, "errors": {}}), flush=True)
for line in sys.stdin:
    mode, steps = line.split()
    print(json.dumps({"mode": mode, "tokens_per_s": 1024.0, "median_step_s": 2.0, "timed_steps": int(steps)}),
          flush=True)
""" % MODES
REFERENCE_HANGS_ON_A_REQUEST = """
import json, os, sys, time
print(json.dumps({"ready": %r, "errors": {}}), flush=True)
sys.stdin.readline()
with open(os.environ["NFN_TEST_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(3600)
""" % MODES


class CpuTimeoutTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.pids = os.path.join(self.tmp, "pids")
        os.environ["NFN_TEST_PIDS"] = self.pids

    def tearDown(self):
        # Stand-ins a failing benchmark left hanging: ended here, not left to sleep on.
        if os.path.exists(self.pids):
            with open(self.pids) as f:
                for pid in map(int, f):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def script(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(f"#!{sys.executable}\n" + textwrap.dedent(text))
        os.chmod(path, 0o755)
        return path

    def bench(self, trainer, reference, *more):
        """bench_train.py on the stand-ins, in a child held to a minute: (exit code, its JSON,
        seconds it took)."""
        refdir = os.path.join(self.tmp, "ref")
        os.makedirs(refdir, exist_ok=True)
        self.script(os.path.join("ref", "bench_train_torch_cpu.py"), reference)
        argv = ["--backend", "cpu", "--trainer", self.script("trainer", trainer), "--rounds", "1", "--steps", "1",
                "--json", *more]
        # bench_train_cpu finds the reference's script in HERE: the stand-in's directory.
        code = (f"import sys; sys.path.insert(0, {TOOLS!r}); import bench_train, bench_train_cpu; "
                f"bench_train_cpu.HERE = {refdir!r}; sys.exit(bench_train.main({argv!r}))")
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("bench_train.py still ran after 60 s")
        took = time.monotonic() - t0
        try:
            return proc.returncode, json.loads(proc.stdout), took
        except ValueError:
            self.fail(f"exit {proc.returncode}, no JSON: {proc.stdout}{proc.stderr}")

    def assert_all_ended(self):
        """Every stand-in that hung was killed (and reaped): none of their pids runs."""
        with open(self.pids) as f:
            pids = [int(line) for line in f]
        self.assertTrue(pids)
        for pid in pids:
            with self.assertRaises(ProcessLookupError, msg=f"pid {pid} still runs"):
                os.kill(pid, 0)

    def test_a_hung_trainer_and_reference_are_stopped(self):
        code, result, took = self.bench(HANG, HANG, "--timeout", "1")
        self.assertEqual(code, 1)
        self.assertLess(took, 30)
        self.assertEqual({m: r["error"] for m, r in result["nfn"]["modes"].items()},
                         {"matmul_f32": "trainer ran past 1 s", "matmul_bf16": "trainer ran past 1 s"})
        self.assertEqual({m: r["error"] for m, r in result["pytorch"]["modes"].items()},
                         dict.fromkeys(MODES, "reference ran past 1 s"))
        self.assertIsNone(result["ratio"])
        self.assert_all_ended()

    def test_a_reference_hung_on_a_request_is_stopped(self):
        code, result, took = self.bench(TRAINER_OK, REFERENCE_HANGS_ON_A_REQUEST, "--timeout", "2")
        self.assertEqual(code, 1)
        self.assertLess(took, 30)
        self.assertEqual(result["nfn"]["tokens_per_s"], 8 * 256 / 0.5)
        # The first mode's request hung; the modes after it are not asked of a killed process.
        self.assertEqual({m: r["error"] for m, r in result["pytorch"]["modes"].items()},
                         dict.fromkeys(MODES, "reference ran past 2 s"))
        self.assert_all_ended()

    def test_sides_within_the_limit_are_measured(self):
        code, result, _ = self.bench(TRAINER_OK, REFERENCE_OK, "--timeout", "20")
        self.assertEqual(code, 0)
        self.assertEqual(result["nfn"]["tokens_per_s"], 8 * 256 / 0.5)
        self.assertEqual(result["pytorch"]["tokens_per_s"], 1024.0)
        self.assertEqual(result["ratio"], 4.0)
        code, result, _ = self.bench(TRAINER_OK, REFERENCE_OK)  # the default limit
        self.assertEqual((code, result["ratio"]), (0, 4.0))

    def test_cuda_mfu_counts_flops_as_the_trainer_does(self):
        # Stand-ins: a trainer whose report has 5 warm-up steps, then 3 of 0.5 s and its count
        # of FLOPs a token, and a reference with its own count; both rows' MFU take the trainer's.
        trainer = self.script("cuda_trainer", """
            import json
            print(json.dumps({"step_seconds": [1.0] * 5 + [0.5] * 3, "flops_per_token": 3000.0}))
            """)
        refdir = os.path.join(self.tmp, "cuda_ref")
        os.makedirs(refdir)
        self.script(os.path.join("cuda_ref", "bench_train_torch_cuda.py"), """
            import json
            print(json.dumps({"impl": "pytorch", "tokens_per_s": 50.0, "flops_per_token": 2999.0, "mfu": 0.5}))
            """)
        argv = ["--backend", "cuda", "--trainer", trainer, "--modes", "cudnn", "--steps", "3", "--batch-size", "2",
                "--seq-len", "4", "--peak-tflops", "1e-9", "--json"]
        code = (f"import sys; sys.path.insert(0, {TOOLS!r}); import bench_train; "
                f"bench_train.HERE = {refdir!r}; sys.exit(bench_train.main({argv!r}))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        result = json.loads(proc.stdout)
        nfn, ref = result["nfn"], result["pytorch"]
        self.assertEqual(nfn["tokens_per_s"], 8 / 0.5)  # the last timed step holds two steps' work
        self.assertAlmostEqual(nfn["mfu"], 8 / 0.5 * 3000 / 1e3)
        self.assertEqual(ref["flops_per_token"], 3000.0)
        self.assertAlmostEqual(ref["mfu"], 50 * 3000 / 1e3)
        self.assertEqual(result["ratio"], 16 / 50)

    def test_flags(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(bench_train.main(["--backend", "cpu", "--timeout", "0"]), 2)
        self.assertEqual(err.getvalue(), "bench_train: --timeout 0 must be at least 1 second\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            bench_train.parse_args(["--help"])
        help_text = " ".join(out.getvalue().split())
        self.assertIn("cuda: nfn per mode, the reference (default 130); cpu: each trainer run, the reference's "
                      "start (every mode built and warmed up) and each of its answers (one mode's steps of a round) "
                      "(default 600)", help_text)


if __name__ == "__main__":
    unittest.main()
