"""tools/device_rows.py, the summaries tools/device_check.sh prints on the GPU machine, on the
formats its tools really write: the trainer's --json reports (a tiny GPT on the CPU library and
on the CUDA library under the emulator, with and without graphs), bench_ops' tables (the CUDA
library under the emulator, labelled as device_check labels them), and bench_train's result,
nvidia-smi's samples and Nsight Compute's CSV as their documented layouts. A summary that
breaks costs a GPU run's row, so each verdict is checked both ways."""
import csv
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.abspath(os.environ["NFN_DEVICE_ROWS"]))
sys.path.insert(0, TOOLS)
import device_rows  # noqa: E402
from bench_train import device_steps, progress, successor_tokens, write_shard_tokens  # noqa: E402

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
BENCH_OPS = os.path.abspath(os.environ["NFN_BENCH_OPS"])
CPU_LIB = os.path.abspath(os.environ["NFN_CPU_OPS_LIB"])
EMULATED_LIB = os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


class TrainerReports(unittest.TestCase):
    """train and same, on real reports of a tiny GPT (2 layers, head size 64, 4 steps)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        rng = random.Random(3)
        succ = [rng.randrange(128) for _ in range(128)]
        write_shard_tokens(os.path.join(data, "tiny_train_000000.bin"), successor_tokens(5000, succ, rng))
        write_shard_tokens(os.path.join(data, "tiny_val_000000.bin"), successor_tokens(1000, succ, rng))
        common = ["--train-data", data, "--vocab-size", "128", "--num-layers", "2", "--num-heads", "2",
                  "--model-dim", "128", "--train-seq-len", "64", "--batch-size", "2", "--train-batch-tokens", "256",
                  "--max-steps", "4", "--warmup-steps", "1", "--learning-rate", "3e-3", "--eval-every-steps", "4",
                  "--eval-batches", "1", "--seed", "11", "--json"]
        runs = {"cpu": ["--backend", "cpu", "--tile-ops-lib", CPU_LIB, "--matmul", "f32"],
                "eager": ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                          "--attention", "flash_mma", "--graphs", "off"],
                "graphs": ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                           "--attention", "flash_mma", "--graphs", "on"]}
        cls.paths = {}
        for name, args in runs.items():
            path = os.path.join(cls.tmp, f"train_{name}.json")
            with open(path, "w") as out, open(path[:-5] + ".err", "w") as err:
                proc = subprocess.run([TRAINER, *common, *args, "--output-dir", os.path.join(cls.tmp, name)],
                                      stdout=out, stderr=err, timeout=300)
            assert proc.returncode == 0, open(path[:-5] + ".err").read()
            cls.paths[name] = path

    def edited(self, name, edit):
        """A copy of a run's report with edit applied to it."""
        with open(self.paths[name]) as f:
            report = json.load(f)
        edit(report)
        return write(os.path.join(self.tmp, f"edited_{name}.json"), json.dumps(report))

    def test_train_passes_within_bf16_tolerance_and_fails_beyond_it(self):
        line = device_rows.train(self.paths["cpu"], self.paths["eager"], "0.03", "0")
        self.assertRegex(line, r"^PASS loss [\d.]+->[\d.]+, worst step rel diff vs cpu [\d.e+-]+ \(bound 0.03\)$")
        worst = float(re.search(r"vs cpu (\S+)", line).group(1))
        self.assertGreater(worst, 0)  # bf16 against f32: close, not equal
        self.assertTrue(device_rows.train(self.paths["cpu"], self.paths["eager"], f"{worst / 2:g}", "0")
                        .startswith("FAIL"))

    def test_train_fails_a_run_that_does_not_learn_or_has_other_steps(self):
        def flat(r):
            r["train_losses"][-1][1] = r["train_losses"][0][1] + 1
        self.assertTrue(device_rows.train(self.paths["cpu"], self.edited("cpu", flat), "1", "0").startswith("FAIL"))
        shorter = self.edited("eager", lambda r: r["train_losses"].pop())
        self.assertIn("rel diff vs cpu inf", device_rows.train(self.paths["cpu"], shorter, "1", "0"))

    def test_train_without_a_report_names_the_stderr_line(self):
        missing = os.path.join(self.tmp, "train_cuda_none.json")
        write(missing, "")
        write(missing[:-5] + ".err", "first\nnfn_gpt_native_train: error: out of memory\n")
        self.assertEqual(device_rows.train(self.paths["cpu"], missing, "0.03", "1"),
                         "FAIL train_cuda_none: no report: nfn_gpt_native_train: error: out of memory")
        self.assertIn("ran past its time limit", device_rows.train(self.paths["cpu"], missing, "0.03", "124"))

    def test_same_losses_with_graphs(self):
        line = device_rows.same(self.paths["eager"], self.paths["graphs"])
        self.assertRegex(line, r"^PASS losses bitwise equal; median step [\d.]+ ms with graphs, [\d.]+ ms op by op "
                               r"\(enqueue [\d.]+ vs [\d.]+ ms\)$")
        # One recording is the contract: none (graphs fell back) fails, as do other losses.
        self.assertTrue(device_rows.same(self.paths["eager"], self.paths["eager"]).startswith("FAIL"))

        def nudge(r):
            r["train_losses"][2][1] = r["train_losses"][2][1] + 1e-6
        self.assertIn("losses DIFFER", device_rows.same(self.paths["eager"], self.edited("graphs", nudge)))


class BenchOpsLog(unittest.TestCase):
    """ops, on bench_ops' real tables (the CUDA library under the emulator, tiny geometry)."""

    def bench_ops(self, *args):
        proc = subprocess.run([BENCH_OPS, "--lib", EMULATED_LIB, "--geometry", "tiny", "--reps", "1", "--dtype", "bf16",
                               *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_runs_as_device_check_labels_them(self):
        first = self.bench_ops("--configure", "attention=flash_mma", "--lm-head-rows", "8,16")
        log = "\n".join([
            "== attention=flash_mma", first,
            "== attention=flash_mma gemm_tune=on", self.bench_ops("--configure", "attention=flash_mma",
                                                                  "--configure", "gemm_tune=on"),
            "== attention=flash", self.bench_ops("--configure", "attention=flash", "--only", "attention"),
            "== attention=thunderkittens", "bench_ops attention=thunderkittens failed",
            "== attention=flash_mma overlap=on", self.bench_ops("--configure", "attention=flash_mma", "--configure",
                                                                "overlap=on", "--only", "linear_backward")])
        path = write(os.path.join(tempfile.mkdtemp(), "bench_ops.txt"), log)
        line = device_rows.ops(path)
        # The micro-step total is bench_ops' own, summed here from its rows.
        own = float(re.search(r"ops per micro-step: ([\d.]+) ms", first).group(1))
        self.assertRegex(line, r"^PASS [\d.]+ ms a micro-step of 128 tokens; top ms: ")
        self.assertAlmostEqual(float(line.split()[1]), own, delta=0.1 + 1e-3 * own)
        # The overlap run times no attention: not in the attention list.
        self.assertRegex(line, r"; attention fwd\+bwd a call: flash_mma [\d.]+ ms, flash [\d.]+ ms;")
        self.assertRegex(line, r"; GEMM ops a micro-step [\d.]+ ms, [\d.]+ with gemm_tune;")
        self.assertRegex(line, r"; linear_backward a micro-step [\d.]+ ms, [\d.]+ with overlap;")
        self.assertRegex(line, r"; lm_head a call by rows a chunk: auto [\d.]+, 8 [\d.]+, 16 [\d.]+, weighted [\d.]+;")
        self.assertRegex(line, r"; embedding_backward a call: spread ids [\d.]+ ms, text-like ids [\d.]+ ms;")
        self.assertTrue(line.endswith("; cuBLASLt epilogues: gelu_aux_bias 3/3, dgelu 3/3, dgelu_bgrad 3/3 fused"), line)
        runs = device_rows.parse_ops(log)
        self.assertEqual([label for label, _, _ in runs],
                         ["flash_mma", "flash_mma gemm_tune=on", "flash", "flash_mma overlap=on"])
        self.assertEqual(sorted(runs[3][1]), sorted(n for n in runs[0][1] if n.startswith("linear_backward")))

    def test_a_failed_first_run_is_its_last_line(self):
        path = write(os.path.join(tempfile.mkdtemp(), "bench_ops.txt"),
                     "== attention=cudnn\nbench_ops: cannot load the library: no such file\n\n")
        self.assertEqual(device_rows.ops(path), "FAIL bench_ops: cannot load the library: no such file")


def bench_result(ratio=1.1):
    """A tools/bench_train.py --json result: two nfn modes (one failed), the reference."""
    ok = {"impl": "nfn", "tokens_per_s": 541332.4, "step_ms": 30.27, "enqueue_ms": 0.41, "mfu": 0.4371}
    return {"model": "gpt2-124m", "batch_size": 16, "seq_len": 1024, "accum": 1, "steps": 20,
            "nfn": dict(ok, mode="cudnn+graphs+tune",
                        modes={"cudnn+graphs+tune": ok, "cudnn+graphs+nondet": {"error": "trainer exited 1: boom"}}),
            "pytorch": {"impl": "pytorch", "tokens_per_s": 496576.0, "mfu": 0.401},
            "ratio": ratio}


class BenchAndClocksAndProfile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.no_smi = os.path.join(self.tmp, "absent.csv")

    def test_bench(self):
        path = write(os.path.join(self.tmp, "bench.json"), json.dumps(bench_result()))
        err = write(os.path.join(self.tmp, "bench.err"), "")
        self.assertEqual(device_rows.bench(path, err, self.no_smi),
                         "PASS nfn [cudnn+graphs+tune: 541332 tok/s MFU 43.7% host 0.4/30.3 ms] "
                         "[cudnn+graphs+nondet: trainer exited 1: boom] | torch 496576 tok/s MFU 40.1% | ratio 1.100")
        self.assertEqual(device_rows.best(path, err), "cudnn+graphs+tune")
        failed = write(os.path.join(self.tmp, "failed.json"), json.dumps(bench_result(ratio=None)))
        self.assertTrue(device_rows.bench(failed, err, self.no_smi).startswith("FAIL nfn "))
        self.assertTrue(device_rows.bench(failed, err, self.no_smi).endswith("| ratio none"))
        absent = os.path.join(self.tmp, "absent.json")
        self.assertTrue(device_rows.bench(absent, err, self.no_smi).startswith("FAIL no result"))
        self.assertEqual(device_rows.best(absent, err), "")

    def test_a_reference_with_an_error_is_no_rate(self):
        # bench_train_torch_cuda.py keeps its rate beside "error" when its loss is NaN: no ratio.
        result = bench_result(ratio=None)
        result["pytorch"]["error"] = "loss is not finite"
        path = write(os.path.join(self.tmp, "nan_ref.json"), json.dumps(result))
        row = device_rows.bench(path, write(os.path.join(self.tmp, "nan_ref.err"), ""), self.no_smi)
        self.assertTrue(row.startswith("FAIL nfn "), row)
        self.assertTrue(row.endswith("| torch loss is not finite | ratio none"), row)

    def test_device_steps_count_the_device_work_they_hold(self):
        # The trainer's schedule on a GPU: it issues step k (host time h), then waits for step
        # k-1's results; the device runs steps back to back (g each). A step's time runs from
        # its issue to the next step's, the last one's to its own read (trainer.cc). Over the
        # steps after the warm-up, bench_train's rate must be the device's 1/g.
        for g, h, steps in ((30.0, 0.4, 20), (30.0, 0.4, 5), (2.0, 1.5, 8)):
            issue, done, t = [], [], 0.0
            for k in range(5 + steps):
                issue.append(t)
                done.append(max(t + h, done[-1] if done else 0.0) + g)
                t = max(t + h, done[k - 1] if k else 0.0)  # the read of step k-1
            times = [issue[k + 1] - issue[k] for k in range(len(issue) - 1)] + [done[-1] - issue[-1]]
            kept = device_steps(times[5:])
            with self.subTest(g=g, h=h, steps=steps):
                self.assertAlmostEqual(len(kept) / sum(kept), 1 / g, delta=0.01 / g)

    def test_a_stopped_bench_keeps_the_runs_that_finished(self):
        # device_check's time limit stops bench_train before it prints its JSON: the rows come
        # from the lines bench_train.progress wrote to stderr as each run finished.
        modes = bench_result()["nfn"]["modes"]
        stderr = io.StringIO()
        real, sys.stderr = sys.stderr, stderr
        try:
            for mode, result in modes.items():
                progress(f"nfn {mode}", result)
        finally:
            sys.stderr = real
        empty = write(os.path.join(self.tmp, "bench.json"), "")
        err = write(os.path.join(self.tmp, "bench.err"), "a warning from the trainer\n" + stderr.getvalue())
        self.assertEqual(device_rows.bench(empty, err, self.no_smi),
                         "FAIL stopped from outside; finished runs only: nfn "
                         "[cudnn+graphs+tune: 541332 tok/s MFU 43.7% host 0.4/30.3 ms] "
                         "[cudnn+graphs+nondet: trainer exited 1: boom] | torch stopped before the reference "
                         "finished | ratio none")
        self.assertEqual(device_rows.best(empty, err), "cudnn+graphs+tune")
        # The reference finished too (stopped while printing): the ratio is the fastest mode's.
        with open(err, "a") as f:
            f.write("bench_train: pytorch " + json.dumps(bench_result()["pytorch"]) + "\n")
        self.assertTrue(device_rows.bench(empty, err, self.no_smi).endswith("| torch 496576 tok/s MFU 40.1% | ratio 1.090"))
        # Nothing finished: no result, said so.
        none = write(os.path.join(self.tmp, "none.err"), "a warning from the trainer\n")
        self.assertTrue(device_rows.bench(empty, none, self.no_smi).startswith("FAIL no result"))
        self.assertEqual(device_rows.best(empty, none), "")

    def test_clocks_under_load(self):
        # nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
        # --format=csv,noheader,nounits: idle samples (a process starting) and unreadable ones
        # are left out.
        lines = ["1980, 95.10, 31, 0x0000000000000001",
                 "1755, 690.50, 52, 0x0000000000000004",
                 "1830, 640.00, 55, 0x0000000000000000",
                 "1785, 700.20, 57, 0x0000000000000004",
                 "[N/A], [N/A], 40, [N/A]",
                 "Failed to initialize NVML"]
        summary = ("INFO under load (3 samples): SM clock median 1785 MHz (min 1755, max 1830), power median "
                   "690 W (max 700), max 57 C; clock event reasons 0x0000000000000000 0x0000000000000004")
        path = write(os.path.join(self.tmp, "smi.csv"), "\n".join(lines))
        self.assertEqual(device_rows.clocks(path), summary)
        # As device_check's sampler writes them: each line stamped with the time it arrived
        # (or an empty stamp, where the shell has no $EPOCHREALTIME).
        stamped = write(os.path.join(self.tmp, "stamped.csv"),
                        "\n".join(f"{1796106866.25 + i / 4:.6f}, {line}" for i, line in enumerate(lines)))
        self.assertEqual(device_rows.clocks(stamped), summary)
        self.assertEqual(device_rows.smi_samples(stamped)[1], (1796106866.5, 1755.0, 690.5, 52.0, "0x0000000000000004"))
        blank = write(os.path.join(self.tmp, "blank.csv"), "\n".join(", " + line for line in lines))
        self.assertEqual(device_rows.clocks(blank), summary)
        idle = write(os.path.join(self.tmp, "idle.csv"), "1980, 95.10, 31\n")
        self.assertTrue(device_rows.clocks(idle).startswith("INFO no samples above 300 W"))

    def test_bench_gives_each_run_its_clock(self):
        t = 1796106800.0  # seconds since the epoch, as bench_train and the sampler write them
        result = bench_result()
        result["nfn"]["modes"]["cudnn+graphs+tune"].update(t0=t + 100, t1=t + 110)
        result["pytorch"].update(t0=t + 110, t1=t + 130)
        path = write(os.path.join(self.tmp, "bench.json"), json.dumps(result))
        # Under load at 1700-1760 MHz during nfn's run, 1900 during the reference's; an idle
        # sample inside a run (the process starting) and samples outside the runs do not count.
        samples = [(99, 1980, 650), (100.5, 1980, 90), (101, 1700, 690), (105, 1760, 695), (109, 1740, 700),
                   (115, 1900, 600), (120, 1900, 610), (140, 1400, 700)]
        smi = write(os.path.join(self.tmp, "smi.csv"),
                    "\n".join(f"{t + dt:.6f}, {mhz}, {watts}.00, 55, 0x0" for dt, mhz, watts in samples))
        self.assertEqual(device_rows.bench(path, self.no_smi, smi),
                         "PASS nfn [cudnn+graphs+tune: 541332 tok/s MFU 43.7% host 0.4/30.3 ms 1740 MHz] "
                         "[cudnn+graphs+nondet: trainer exited 1: boom] | torch 496576 tok/s MFU 40.1% 1900 MHz "
                         "| ratio 1.100")

    def test_profile(self):
        fields = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
                  "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
        out = io.StringIO()
        out.write("==PROF== Connected to process 4242\n")
        w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(fields)
        kernels = [("void nfn::cuda::(anonymous namespace)::embedding_forward_kernel<bf16>(bf16*, int)", "usecond", "9.5"),
                   ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "usecond", "1,105.25"),
                   ("void nfn::cuda::(anonymous namespace)::norm_forward_kernel<bf16>(bf16*)", "nsecond", "18000"),
                   ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "msecond", "0.2")]
        for step in range(3):
            for i, (name, unit, value) in enumerate(kernels):
                w.writerow([str(step * 4 + i), "4242", "nfn_gpt_native_train", "127.0.0.1", name, "1", "7", "(256, 1, 1)",
                            "(132, 1, 1)", "0", "9.0", "Command line profiler metrics", "gpu__time_duration.sum",
                            unit, value])
        w.writerow([str(99), "4242", "nfn_gpt_native_train", "127.0.0.1", kernels[0][0], "1", "7", "(256, 1, 1)",
                    "(132, 1, 1)", "0", "9.0", "Command line profiler metrics", "gpu__time_duration.sum",
                    "usecond", "9.5"])  # the fourth step's start closes the third
        path = write(os.path.join(self.tmp, "ncu.csv"), out.getvalue())
        table = os.path.join(self.tmp, "profile.txt")
        self.assertEqual(device_rows.profile(path, table),
                         "PASS 4 kernels, 1.33 ms of kernel time a step; top ms: "
                         "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coo 1.31, nfn::cuda::norm_forward_kernel<bf16> 0.02, "
                         "nfn::cuda::embedding_forward_kernel<bf16 0.01 (profile.txt)")
        with open(table) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "step 2: 4 kernels, 1.33 ms of kernel time")
        self.assertEqual(lines[2].split(), ["1.305", "2", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"])
        short = write(os.path.join(self.tmp, "short.csv"), out.getvalue().split('"4",')[0])
        self.assertEqual(device_rows.profile(short, table),
                         "FAIL 4 kernels profiled, 1 step starts (embedding_forward) found, 3 wanted")

    def test_command_line(self):
        script = os.path.join(TOOLS, "device_rows.py")
        path = write(os.path.join(self.tmp, "bench.json"), json.dumps(bench_result()))
        err = write(os.path.join(self.tmp, "bench.err"), "")
        proc = subprocess.run([sys.executable, script, "best", path, err], capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stdout), (0, "cudnn+graphs+tune\n"))
        # A summary that breaks on its input is still one row.
        broken = write(os.path.join(self.tmp, "broken.json"), json.dumps({"nfn": {}}))
        proc = subprocess.run([sys.executable, script, "bench", broken, err, self.no_smi], capture_output=True,
                              text=True)
        self.assertEqual((proc.returncode, proc.stdout), (0, "FAIL bench: KeyError: 'pytorch'\n"))
        proc = subprocess.run([sys.executable, script, "bench"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("device_rows.py train", proc.stderr)


if __name__ == "__main__":
    unittest.main()
