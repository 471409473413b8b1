"""The native trainer binary end to end on a tiny model: resume is bitwise identical to an
uninterrupted run, incomplete checkpoints are ignored, and bad input gives one clear line
and a non-zero exit without losing the last good checkpoint."""
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from shards import write_shard

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
VOCAB = 64



def make_data(root):
    rng = np.random.default_rng(0)
    # A learnable stream: a noisy repeating pattern.
    base = np.tile(np.arange(VOCAB), 200)
    noise = rng.integers(0, VOCAB, size=base.size)
    tokens = np.where(rng.random(base.size) < 0.2, noise, base)
    write_shard(os.path.join(root, "tiny_train_000000.bin"), tokens[:10000])
    write_shard(os.path.join(root, "tiny_val_000000.bin"), tokens[10000:12000])


def run(args, check=True):
    proc = subprocess.run([TRAINER] + args, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}): {proc.stderr}")
    return proc


class TrainerRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        make_data(cls.data)
        cls.common = ["--train-data", cls.data, "--vocab-size", str(VOCAB), "--num-layers", "2",
                      "--num-heads", "2", "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "4",
                      "--train-batch-tokens", "128", "--max-steps", "6", "--warmup-steps", "2",
                      "--learning-rate", "3e-3", "--eval-every-steps", "3", "--eval-batches", "2",
                      "--checkpoint-every", "3", "--backend", "cpu", "--threads", "2", "--seed", "5"]
        cls.full = os.path.join(cls.tmp, "full")
        cls.report = json.loads(run(cls.common + ["--output-dir", cls.full, "--json"]).stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def interrupted_copy(self, name, keep_done=True):
        """The full run's directory as a crash after step 3's checkpoint would leave it."""
        out = os.path.join(self.tmp, name)
        shutil.copytree(self.full, out)
        for f in ["model_00000006.bin", "state_00000006_00000.bin", "DONE_00000006", "report.json"]:
            os.remove(os.path.join(out, f))
        if not keep_done:
            os.remove(os.path.join(out, "DONE_00000003"))
        return out

    def test_benchmark_flags(self):
        # --no-checkpoint: the same run, and nothing but its log and report on disk.
        out = os.path.join(self.tmp, "no_checkpoint")
        r = json.loads(run(self.common + ["--output-dir", out, "--json", "--no-checkpoint"]).stdout)
        self.assertEqual(sorted(os.listdir(out)), [".lock", "log.jsonl", "report.json"])  # .lock: one run at a time
        self.assertIsNone(r["model_file"])
        self.assertEqual(r["train_losses"], self.report["train_losses"])
        # Validation over the same 8 rows, 2 batches of 4 or 4 of 2: the same mean loss.
        def val_loss(*flags):
            got = json.loads(run(self.common + ["--output-dir", os.path.join(self.tmp, "eval_" + "_".join(flags)),
                                                "--json", "--max-steps", "1", "--no-checkpoint", *flags]).stdout)
            return got["final_validation_loss"]
        self.assertAlmostEqual(val_loss("--eval-batches", "4", "--eval-batch-size", "2"),
                               val_loss("--eval-batches", "2", "--eval-batch-size", "4"), places=5)
        # The LM head in chunks of 8 rows: the same losses (the first step's exactly: each
        # row's loss is its own; the gradients add in another order).
        chunked = json.loads(run(self.common + ["--output-dir", os.path.join(self.tmp, "chunked"), "--json",
                                                "--no-checkpoint", "--lm-head-row-chunk-size", "8"]).stdout)
        self.assertEqual(chunked["train_losses"][0], self.report["train_losses"][0])
        for (_, got), (_, want) in zip(chunked["train_losses"], self.report["train_losses"]):
            self.assertAlmostEqual(got, want, places=4)
        self.assertEqual(chunked["op_library"]["options"]["lm_head_rows"], "8")
        bad = run(self.common + ["--output-dir", os.path.join(self.tmp, "bad_rows"), "--lm-head-row-chunk-size", "-1"],
                  check=False)
        self.assertEqual((bad.returncode, len(bad.stderr.strip().splitlines())), (2, 1), bad.stderr)
        self.assertIn("--lm-head-row-chunk-size: configure: lm_head_rows=-1", bad.stderr)

    def test_report(self):
        r = self.report
        self.assertEqual(r["model_family"], "gpt")
        self.assertEqual(r["steps"], 6)
        self.assertEqual(r["parameters"], 2 * 12 * 32 * 32 + 2 * 13 * 32 + 128 * 32 + 16 * 32 + 2 * 32)
        # FLOPs a token as llm.c counts them: 6 a parameter, and attention's 6 L T C.
        self.assertEqual(r["flops_per_token"], 6 * r["parameters"] + 6 * 2 * 16 * 32)
        self.assertEqual([s for s, _ in r["train_losses"]], [1, 2, 3, 4, 5, 6])
        self.assertEqual([s for s, _ in r["validation_losses"]], [3, 6])
        self.assertEqual(r["final_validation_loss"], r["validation_losses"][-1][1])
        self.assertLess(r["train_losses"][-1][1], r["train_losses"][0][1])
        self.assertGreater(r["train_tokens_per_second"], 0)
        # One duration per step, and together they are the training time behind the rate.
        self.assertEqual(len(r["step_seconds"]), 6)
        self.assertTrue(all(s > 0 for s in r["step_seconds"]))
        self.assertAlmostEqual(sum(r["step_seconds"]), r["train_tokens"] / r["train_tokens_per_second"], places=6)
        # The host's time to issue each step: within the step's time.
        self.assertEqual(len(r["enqueue_seconds"]), 6)
        self.assertTrue(all(0 < e <= s for e, s in zip(r["enqueue_seconds"], r["step_seconds"])))
        self.assertEqual(r["checkpoint_dir"], self.full)
        manifest = json.loads(self.read(os.path.join(self.full, "manifest.json")))
        self.assertEqual(manifest["geometry"]["channels"], 32)
        self.assertEqual(manifest["weights"], "model_00000006.bin")

    def test_gemms_in_bf16_by_default_where_the_cpu_has_bf16_units(self):
        with open("/proc/cpuinfo") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
        units = bool(flags & {"avx512_bf16", "amx_bf16"})
        self.assertEqual(self.report["op_library"]["matmul"], "bf16" if units else "f32")
        # --matmul f32 is f32 anywhere, and the two runs differ where bf16 ran.
        out = os.path.join(self.tmp, "f32")
        f32 = json.loads(run(self.common + ["--output-dir", out, "--json", "--matmul", "f32"]).stdout)
        self.assertEqual(f32["op_library"]["matmul"], "f32")
        self.assertEqual(f32["train_losses"] == self.report["train_losses"], not units)

    def test_resume_is_bitwise_identical(self):
        out = self.interrupted_copy("resumed")
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--json"])
        self.assertNotIn("another schedule", proc.stderr)  # the same flags: the same schedule
        report = json.loads(proc.stdout)
        self.assertEqual(report["resumed_from"], os.path.join(out, "model_00000003.bin"))
        self.assertEqual(report["train_losses"], self.report["train_losses"][3:])
        self.assertEqual(report["final_validation_loss"], self.report["final_validation_loss"])
        for f in ["model_00000006.bin", "state_00000006_00000.bin"]:
            self.assertEqual(self.read(os.path.join(out, f)), self.read(os.path.join(self.full, f)), f)

    def test_recompute_trains_the_same_weights_in_less_memory(self):
        # The backward reruns what a mode recomputes instead of keeping it for each layer: the
        # same ops on the same inputs, so every checkpoint (two micro-steps a step: accumulated
        # gradients), validation and the sample are the full run's, byte for byte. The block
        # shrinks by L - 1 layers' copies of what is recomputed (f32, in 256-byte slots).
        L, C, NH, N = 2, 32, 2, 4 * 16
        align = lambda b: (b + 255) // 256 * 256
        saved = lambda *per_layer: sum(align(L * b) - align(b) for b in per_layer)
        attention = saved(N * C * 4, N * 4, N * 4, 3 * N * C * 4, N * C * 4, N * NH * 4, N * C * 4)
        mlp = saved(N * C * 4, N * 4, N * 4, 4 * N * C * 4, 4 * N * C * 4)
        for mode, bytes_saved in (("attention", attention), ("mlp", mlp), ("all", attention + mlp)):
            with self.subTest(mode=mode):
                out = os.path.join(self.tmp, "recompute_" + mode)
                proc = run(self.common + ["--output-dir", out, "--json", "--recompute", mode])
                r = json.loads(proc.stdout)
                for key in ("train_losses", "validation_losses", "sample_tokens"):
                    self.assertEqual(r[key], self.report[key], key)
                for f in ["model_00000003.bin", "model_00000006.bin", "state_00000006_00000.bin"]:
                    self.assertEqual(self.read(os.path.join(out, f)), self.read(os.path.join(self.full, f)), f)
                self.assertEqual(self.report["activation_bytes"] - r["activation_bytes"], bytes_saved)
                self.assertEqual(self.report["memory_bytes"] - r["memory_bytes"], bytes_saved)
                self.assertEqual(r["config"]["recompute"], mode)
                first = proc.stderr.splitlines()[0]
                self.assertIn(f"(activations {r['activation_bytes'] / 2**20:.1f} MiB, --recompute {mode})", first)
        self.assertEqual(self.report["config"]["recompute"], "none")
        # A checkpoint of a run that kept every activation resumes under recompute, bitwise.
        out = self.interrupted_copy("recompute_resumed")
        report = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json",
                                               "--recompute", "all"]).stdout)
        self.assertEqual(report["train_losses"], self.report["train_losses"][3:])
        for f in ["model_00000006.bin", "state_00000006_00000.bin"]:
            self.assertEqual(self.read(os.path.join(out, f)), self.read(os.path.join(self.full, f)), f)
        bad = run(self.common + ["--output-dir", os.path.join(self.tmp, "x"), "--recompute", "some"], check=False)
        self.assertEqual((bad.returncode, bad.stderr), (2, "nfn_gpt_native_train: error: --recompute some: expected "
                                                           "one of none, attention, mlp, all\n"))

    def test_stage_timing_accounts_for_the_step(self):
        # Every stage is timed (two micro-steps a step) and the run is the untimed one, bit for
        # bit. On the CPU the events read the host's clock inside each step, so the stages add
        # up to no more than the step; what lies outside them is the host's bookkeeping after
        # the optimizer (queueing the loss's read, its event, a log line): microseconds of a
        # step of milliseconds. Medians over five steps, so one preempted step on a shared
        # machine does not decide; 0.9 would still fail where a stage's events were missing.
        stages = ["data", "embedding", "attention_forward", "mlp_forward", "lm_head", "mlp_backward",
                  "attention_backward", "optimizer"]
        out = os.path.join(self.tmp, "stage_timing")
        proc = run(self.common + ["--output-dir", out, "--json", "--stage-timing"])
        r = json.loads(proc.stdout)
        for key in ("train_losses", "validation_losses", "sample_tokens"):
            self.assertEqual(r[key], self.report[key], key)
        self.assertIsNone(self.report["stage_timing"])
        self.assertFalse(self.report["config"]["stage_timing"])
        self.assertTrue(r["config"]["stage_timing"])
        t = r["stage_timing"]
        self.assertEqual((t["clock"], t["timed_steps"]), ("host clock", 5))  # the first step left out
        self.assertEqual(list(t["stage_ms"]), stages)
        self.assertTrue(all(ms > 0 for ms in t["stage_ms"].values()), t["stage_ms"])
        self.assertEqual(list(t["layer_ms"]), ["attention_forward", "mlp_forward", "mlp_backward",
                                               "attention_backward"])
        for stage, per_layer in t["layer_ms"].items():
            self.assertEqual(len(per_layer), 2, stage)
            self.assertTrue(all(ms > 0 for ms in per_layer), (stage, per_layer))
        self.assertAlmostEqual(t["step_ms"], 1e3 * sorted(r["step_seconds"][1:])[2], delta=1e-4)
        self.assertLessEqual(t["total_ms"], t["step_ms"])
        self.assertGreater(t["total_ms"], 0.9 * t["step_ms"], t)
        # The table at the end lists every stage and the total, with the report's medians.
        lines = proc.stderr.splitlines()
        self.assertIn(", --stage-timing", lines[0])
        start = next(i for i, line in enumerate(lines)
                     if line.startswith("nfn: stage timing (host clock): median of 5 steps"))
        rows = [line.split() for line in lines[start + 2:start + 2 + len(stages)]]
        self.assertEqual([row[0] for row in rows], stages)
        for row in rows:
            self.assertAlmostEqual(float(row[1]), t["stage_ms"][row[0]], delta=0.0006)
        self.assertEqual([len(row) for row in rows], [3, 3, 6, 6, 3, 6, 6, 3])  # per layer: block stages
        medians, total = lines[start + 2 + len(stages)].split(), lines[start + 3 + len(stages)].split()
        self.assertEqual(medians[:4], ["sum", "of", "the", "medians"])
        self.assertAlmostEqual(float(medians[4]), sum(t["stage_ms"].values()), delta=0.003)
        self.assertEqual(total[0], "total")
        self.assertAlmostEqual(float(total[1]), t["total_ms"], delta=0.0006)
        # Graphs cannot hold the events.
        bad = run(self.common + ["--output-dir", os.path.join(self.tmp, "x"), "--stage-timing", "--graphs", "on"],
                  check=False)
        self.assertEqual((bad.returncode, len(bad.stderr.strip().splitlines())), (2, 1), bad.stderr)
        self.assertIn("--stage-timing with --graphs on", bad.stderr)

    def test_resume_with_another_schedule_says_so(self):
        # The schedule comes from this run's flags (or its template's recipe, which may have
        # changed since the checkpoint's run began); where it differs from the one the
        # checkpoint's run recorded, one line names each difference. Other flags are no change.
        out = self.interrupted_copy("reschedule")
        flags = list(self.common)
        flags[flags.index("--learning-rate") + 1] = "1e-3"
        flags[flags.index("--max-steps") + 1] = "8"
        proc = run(flags + ["--output-dir", out, "--resume", "auto", "--final-lr-fraction", "0.5", "--threads", "1"])
        said = [line for line in proc.stderr.splitlines() if "another schedule" in line]
        self.assertEqual(said, [f"nfn: resuming {os.path.join(out, 'model_00000003.bin')}, whose run had another "
                                "schedule: learning_rate 0.003 -> 0.001, final_lr_fraction 0 -> 0.5, max_steps 6 -> 8 "
                                "(this run's, from its flags or its template's recipe, applies from here)"])

    def log_lines(self, out):
        with open(os.path.join(out, "log.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_log_has_every_step_as_it_goes(self):
        self.assertEqual(self.report["log_file"], os.path.join(self.full, "log.jsonl"))
        lines = self.log_lines(self.full)
        train = [(x["step"], x["train_loss"]) for x in lines if "train_loss" in x]
        val = [(x["step"], x["val_loss"]) for x in lines if "val_loss" in x]
        self.assertEqual(train, [tuple(r) for r in self.report["train_losses"]])
        self.assertEqual(val, [tuple(r) for r in self.report["validation_losses"]])
        # in order: step 3's validation after its training line, before step 4's
        self.assertEqual([x["step"] for x in lines], [1, 2, 3, 3, 4, 5, 6, 6])
        for x in lines:
            if "train_loss" in x:
                self.assertGreater(x["grad_norm"], 0)
                self.assertGreater(x["lr"], 0)
                self.assertAlmostEqual(x["tokens_per_s"] * x["step_ms"] / 1e3, 128, places=6)

    def test_learning_rate_follows_the_schedule(self):
        # Linear warmup over 2 steps to 3e-3, then cosine over steps 3-6 to a floor that
        # --final-lr-fraction sets (llm.c's -q): written here from the definition.
        def expected(n, floor_fraction, peak=3e-3, warmup=2, steps=6):
            s = n - 1  # the log counts steps from 1
            if s < warmup:
                return peak * (s + 1) / warmup
            floor = peak * floor_fraction
            return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))

        out = os.path.join(self.tmp, "floor")
        run(self.common + ["--output-dir", out, "--final-lr-fraction", "0.25"])
        for where, fraction in ((self.full, 0.0), (out, 0.25)):
            lrs = [(x["step"], x["lr"]) for x in self.log_lines(where) if "lr" in x]
            self.assertEqual([n for n, _ in lrs], [1, 2, 3, 4, 5, 6])
            for n, lr in lrs:
                self.assertAlmostEqual(lr / expected(n, fraction), 1, delta=1e-6, msg=(where, n))
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["training"]["final_lr_fraction"], 0.25)
        for bad, says in (("1.5", "must be at most 1"), ("-0.1", "must not be negative")):
            proc = run(self.common + ["--output-dir", out, "--final-lr-fraction", bad, "--dry-run"], check=False)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("--final-lr-fraction", proc.stderr)
            self.assertIn(says, proc.stderr)

    def test_resumed_log_continues_from_the_checkpoint(self):
        # The run being resumed got past its step-3 checkpoint (its log says steps 4-6) and was
        # killed in the middle of a line; resuming from step 3 logs steps 4-6 once, afresh.
        out = self.interrupted_copy("resumed_log")
        with open(os.path.join(out, "log.jsonl"), "a", encoding="utf-8") as f:
            f.write('{"step":7,"train_lo')
        run(self.common + ["--output-dir", out, "--resume", "auto"])

        def untimed(lines):  # resume is bitwise identical: all but the timings
            return [{k: v for k, v in x.items() if k not in ("step_ms", "tokens_per_s")} for x in lines]
        self.assertEqual([x["step"] for x in self.log_lines(out)], [1, 2, 3, 3, 4, 5, 6, 6])
        self.assertEqual(untimed(self.log_lines(out)), untimed(self.log_lines(self.full)))

    def test_files_a_killed_run_was_writing_are_removed(self):
        # NAME.tmp.PID of a writer that no longer runs (pid_max + 1 never does) goes; one of a
        # process that still runs (this test) stays.
        out = self.interrupted_copy("orphans")
        with open("/proc/sys/kernel/pid_max") as f:
            dead = int(f.read()) + 1
        orphan = os.path.join(out, f"model_00000004.bin.tmp.{dead}")
        live = os.path.join(out, f"model_00000005.bin.tmp.{os.getpid()}")
        for path in (orphan, live):
            with open(path, "wb") as f:
                f.write(b"half a checkpoint")
        proc = run(self.common + ["--output-dir", out, "--resume", "auto"])
        self.assertIn(f"nfn: removed 1 unfinished file in {out} that a killed run was writing", proc.stderr)
        self.assertFalse(os.path.exists(orphan))
        self.assertTrue(os.path.exists(live))

    def test_checkpoint_without_done_marker_is_ignored(self):
        out = self.interrupted_copy("no_done", keep_done=False)
        # Naming the incomplete checkpoint explicitly is an error, not a silent fresh start.
        proc = run(self.common + ["--output-dir", out, "--resume", os.path.join(out, "model_00000003.bin")],
                   check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("checkpoint is incomplete (no DONE_00000003 beside it)", proc.stderr)
        missing = os.path.join(out, "model_00000009.bin")  # a file that is not there is not "incomplete"
        proc = run(self.common + ["--output-dir", out, "--resume", missing], check=False)
        self.assertEqual((proc.returncode, proc.stderr.strip()),
                         (1, f"nfn_gpt_native_train: error: --resume {missing}: no such file"))
        # auto skips it and starts fresh, which reproduces the full run exactly.
        report = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertIsNone(report["resumed_from"])
        self.assertEqual(report["train_losses"], self.report["train_losses"])
        # a fresh start begins the log anew: the copied lines are gone, not doubled
        self.assertEqual([x["step"] for x in self.log_lines(out)], [1, 2, 3, 3, 4, 5, 6, 6])

    def test_bf16_checkpoints_resume_bitwise(self):
        # The bf16 model file rounds the weights; the state keeps the f32 master weights after
        # the moments (header [4] = 1, as llm.c's use_master_weights), so the resume is exact.
        full = os.path.join(self.tmp, "bf16_full")
        args = self.common + ["--checkpoint-dtype", "bf16"]
        whole = json.loads(run(args + ["--output-dir", full, "--json"]).stdout)
        out = os.path.join(self.tmp, "bf16_resumed")
        shutil.copytree(full, out)
        for f in ["model_00000006.bin", "state_00000006_00000.bin", "DONE_00000006", "report.json"]:
            os.remove(os.path.join(out, f))
        state = np.fromfile(os.path.join(out, "state_00000003_00000.bin"), dtype=np.int32, count=256)
        self.assertEqual(state[4], 1)
        resumed = json.loads(run(args + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertEqual(resumed["train_losses"], whole["train_losses"][3:])
        for f in ["model_00000006.bin", "state_00000006_00000.bin"]:
            self.assertEqual(self.read(os.path.join(out, f)), self.read(os.path.join(full, f)), f)

    def test_failed_overwrite_of_a_step_unmarks_it(self):
        # A fresh run into a directory holding a complete step-3 checkpoint fails while it
        # rewrites that step (its state file cannot replace a directory): the old DONE marker
        # must be gone, or a resume would take this run's model with that run's state.
        out = self.interrupted_copy("overwrite")
        state = os.path.join(out, "state_00000003_00000.bin")
        os.remove(state)
        os.makedirs(os.path.join(state, "blocker"))
        proc = run(self.common + ["--output-dir", out, "--seed", "9"], check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "DONE_00000003")))

    def marker(self, out, step):
        """The manifest a checkpoint's DONE marker holds."""
        return json.loads(self.read(os.path.join(out, f"DONE_{step:08d}")))

    def test_resume_continues_the_run_that_last_wrote_here(self):
        # A fresh run (seed 9) to step 3 in a directory that holds the seed-5 run's steps 3
        # and 6, then --resume auto: the seed-9 run goes on from its own step 3, as if it had
        # never stopped; the seed-5 run's step 6 stays complete, resumable by its file's name.
        out = os.path.join(self.tmp, "second_run")
        shutil.copytree(self.full, out)
        short = json.loads(run(self.common + ["--output-dir", out, "--seed", "9", "--max-steps", "3",
                                              "--json"]).stdout)
        first = self.report["run_id"]
        self.assertRegex(short["run_id"], r"^[0-9a-f]{16}$")
        self.assertNotEqual(short["run_id"], first)
        # Each marker is its checkpoint's manifest; manifest.json, the newest checkpoint's copy.
        self.assertEqual((self.marker(out, 3)["run_id"], self.marker(out, 3)["training"]["seed"]), (short["run_id"], 9))
        self.assertEqual((self.marker(out, 6)["run_id"], self.marker(out, 6)["step"]), (first, 6))
        self.assertEqual(self.read(os.path.join(out, "manifest.json")), self.read(os.path.join(out, "DONE_00000003")))
        resumed = json.loads(run(self.common + ["--output-dir", out, "--seed", "9", "--resume", "auto",
                                                "--max-steps", "5", "--json"]).stdout)
        self.assertEqual(resumed["resumed_from"], os.path.join(out, "model_00000003.bin"))
        self.assertEqual(resumed["run_id"], short["run_id"])
        whole = json.loads(run(self.common + ["--output-dir", os.path.join(self.tmp, "seed9"), "--seed", "9",
                                              "--max-steps", "5", "--json"]).stdout)
        self.assertEqual(resumed["train_losses"], whole["train_losses"][3:])
        # The manifest now names the seed-9 run's step 5; the seed-5 run's step 6, named, is
        # still that run's, and its id goes on with it.
        named = json.loads(run(self.common + ["--output-dir", out, "--resume", os.path.join(out, "model_00000006.bin"),
                                              "--json"]).stdout)
        self.assertEqual((named["train_losses"], named["run_id"]), ([], first))

    def test_resume_continues_a_rewound_run_from_its_last_checkpoint(self):
        # The run resumed from its own step 3 (say with a lower learning rate) to step 5: its
        # step 5, not the abandoned step 6 it wrote before, is what --resume auto continues.
        out = os.path.join(self.tmp, "rewound")
        shutil.copytree(self.full, out)
        run(self.common + ["--output-dir", out, "--resume", os.path.join(out, "model_00000003.bin"),
                           "--learning-rate", "1e-3", "--max-steps", "5"])
        self.assertEqual(self.marker(out, 5)["run_id"], self.report["run_id"])
        resumed = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertEqual(resumed["resumed_from"], os.path.join(out, "model_00000005.bin"))
        # Diverging from there before any checkpoint: the last good one is what it resumed from,
        # not the abandoned step 6.
        shutil.copy(os.path.join(self.full, "model_00000006.bin"), os.path.join(out, "model_00000006.bin"))
        with open(os.path.join(out, "manifest.json"), "wb") as f:
            f.write(self.read(os.path.join(out, "DONE_00000005")))
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--learning-rate", "1e30",
                                  "--checkpoint-every", "0", "--max-steps", "9"], check=False)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn(f"(last good: {out}/model_00000005.bin)", proc.stderr)
        # Stopped between the manifest and step 5's marker: the same run's newest step below.
        os.remove(os.path.join(out, "DONE_00000005"))
        with open(os.path.join(out, "manifest.json"), "wb") as f:
            f.write(self.read(os.path.join(self.full, "manifest.json")).replace(b'"step": 6', b'"step": 5'))
        resumed = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertEqual(resumed["resumed_from"], os.path.join(out, "model_00000003.bin"))

    def test_checkpoints_from_before_run_ids_count_for_any_run(self):
        # Empty markers and a manifest without run_id, as earlier versions wrote them: resumed
        # as before, and a run resumed from one falls back to it if stopped before its own marker.
        out = os.path.join(self.tmp, "old_format")
        shutil.copytree(self.full, out)
        for step in (3, 6):
            open(os.path.join(out, f"DONE_{step:08d}"), "w").close()
        manifest = json.loads(self.read(os.path.join(out, "manifest.json")))
        del manifest["run_id"]
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        longer = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--max-steps", "9",
                                               "--json"]).stdout)
        self.assertEqual(longer["resumed_from"], os.path.join(out, "model_00000006.bin"))
        self.assertNotEqual(longer["run_id"], self.report["run_id"])  # a new id: the old markers name none
        os.remove(os.path.join(out, "DONE_00000009"))
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--max-steps", "9", "--learning-rate",
                                  "1e6", "--json"], check=False)
        self.assertIn(f"resuming from {out}/model_00000006.bin", proc.stderr)
        self.assertIn(f"(last good: {out}/model_00000006.bin)", proc.stderr)  # it diverges at that learning rate

    def test_resume_refuses_when_the_last_run_left_no_checkpoint(self):
        # A later run wrote the manifest and stopped before its first marker: which run to go on
        # with is the user's to say, so neither --resume auto nor --resume DIR picks one.
        out = os.path.join(self.tmp, "last_run_empty")
        shutil.copytree(self.full, out)
        manifest = json.loads(self.read(os.path.join(out, "manifest.json")))
        manifest["run_id"] = "0123456789abcdef"
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        def files():  # all but the lock, which each run takes
            return {name: self.read(os.path.join(out, name)) for name in os.listdir(out) if name != ".lock"}
        before = files()
        for resume in ("auto", out):
            proc = run(self.common + ["--output-dir", out, "--resume", resume], check=False)
            self.assertEqual(proc.returncode, 1)
            self.assertEqual(proc.stderr.strip(), f"nfn_gpt_native_train: error: --resume {resume}: the run that last "
                             f"wrote {out}/manifest.json (run_id 0123456789abcdef, step 6) left no complete "
                             f"checkpoint, and {out}/model_00000006.bin is another run's: name it with --resume to "
                             "continue that run, or leave --resume out to start afresh")
        self.assertEqual(files(), before)

    def test_one_run_writes_a_directory_at_a_time(self):
        # Another process holds the directory's lock, as a running trainer does: this run
        # refuses with its pid and writes nothing; once it is free, the run goes ahead.
        import fcntl
        out = os.path.join(self.tmp, "locked")
        os.makedirs(out)
        with open(os.path.join(out, ".lock"), "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.write("4242\n")
            held.flush()
            proc = run(self.common + ["--output-dir", out], check=False)
            self.assertEqual((proc.returncode, proc.stderr.strip()),
                             (1, f"nfn_gpt_native_train: error: {out}: another run (pid 4242) is writing here; wait "
                                 "for it to end or give this one another --output-dir"))
            self.assertEqual(os.listdir(out), [".lock"])
        report = json.loads(run(self.common + ["--output-dir", out, "--json"]).stdout)
        self.assertEqual(report["train_losses"], self.report["train_losses"])
        # A lock file that is a link is refused, and what it points at is left as it was.
        linked = os.path.join(self.tmp, "linked_lock")
        os.makedirs(linked)
        victim = os.path.join(self.tmp, "victim.txt")
        with open(victim, "w") as f:
            f.write("precious\n")
        os.symlink(victim, os.path.join(linked, ".lock"))
        proc = run(self.common + ["--output-dir", linked], check=False)
        self.assertEqual((proc.returncode, proc.stderr.strip()), (1, f"nfn_gpt_native_train: error: {linked}/.lock: a "
                                                                     "symbolic link, not the run's lock file"))
        self.assertEqual(self.read(victim), b"precious\n")

    def test_resume_on_other_data_reads_it_from_the_start(self):
        # The checkpoint's data position (past 768 tokens) is a place in its own run's shards;
        # on a shorter dataset it would be past the end. The same shards named another way (a
        # link, the folder's one file, a copy) are the same data: the run goes on from its
        # position, bit for bit.
        other = os.path.join(self.tmp, "other_data")
        os.makedirs(other)
        tokens = (np.arange(600) * 7) % VOCAB
        write_shard(os.path.join(other, "other_train_000000.bin"), tokens[:500])
        write_shard(os.path.join(other, "other_val_000000.bin"), tokens[500:])
        out = self.interrupted_copy("other_data_run")
        linked = os.path.join(self.tmp, "data_link")
        os.symlink(self.data, linked)
        copied = os.path.join(self.tmp, "data_copy")
        shutil.copytree(self.data, copied)
        for named in (linked, os.path.join(self.data, "tiny_train_000000.bin"), copied):
            with self.subTest(named=named):
                resumed = self.interrupted_copy(f"same_data_{os.path.basename(named)}")
                same = run(self.common[2:] + ["--train-data", named, "--output-dir", resumed, "--resume", "auto",
                                              "--json"])
                self.assertNotIn("other data", same.stderr)
                self.assertEqual(json.loads(same.stdout)["train_losses"], self.report["train_losses"][3:])
        out = self.interrupted_copy("other_data_run2")
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--max-steps", "9", "--train-data", other,
                                  "--json"])
        self.assertIn(f"resuming on other data ({other}: shards other_train_000000.bin:500; the checkpoint's run read "
                      "tiny_train_000000.bin:10000): reading it from the start", proc.stderr)
        self.assertEqual([s for s, _ in json.loads(proc.stdout)["train_losses"]], [4, 5, 6, 7, 8, 9])

    def test_resume_with_another_seed_reads_the_data_from_the_start(self):
        # The data position is a place in the seed's shard order: another --seed, another order
        # (over three shards), and the run reads the data from the start, saying so; the same
        # seed, or none named (the checkpoint's run's), goes on bit for bit.
        data = os.path.join(self.tmp, "three_shards")
        os.makedirs(data)
        rng = np.random.default_rng(8)
        for i in range(3):
            write_shard(os.path.join(data, f"three_train_{i:06d}.bin"), rng.integers(0, VOCAB, 400))
        write_shard(os.path.join(data, "three_val_000000.bin"), rng.integers(0, VOCAB, 400))
        flags = self.common[2:-2] + ["--train-data", data]
        full = os.path.join(self.tmp, "three_full")
        whole = json.loads(run(flags + ["--seed", "5", "--output-dir", full, "--json"]).stdout)
        for seed, note in (("5", False), ("6", True), (None, False)):
            out = os.path.join(self.tmp, f"three_seed_{seed}")
            shutil.copytree(full, out)
            proc = run(flags + (["--seed", seed] if seed else []) + ["--output-dir", out, "--resume",
                                                                     os.path.join(out, "model_00000003.bin"), "--json"])
            with self.subTest(seed=seed):
                self.assertEqual("another shard order" in proc.stderr, note, proc.stderr)
                if note:
                    self.assertIn("nfn: resuming with --seed 6, another shard order than the checkpoint's run's "
                                  "(seed 5): reading the data from the start", proc.stderr)
                else:
                    self.assertEqual(json.loads(proc.stdout)["train_losses"], whole["train_losses"][3:])

    def test_resume_at_or_past_max_steps(self):
        out = os.path.join(self.tmp, "finished")
        shutil.copytree(self.full, out)
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--max-steps", "4"], check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.strip(), f"nfn_gpt_native_train: error: {out}/model_00000006.bin: its step 6 is "
                                              "past --max-steps 4 (raise --max-steps to train on from it)")
        # at --max-steps: nothing trained, the checkpoint and the log kept as they were
        before = self.read(os.path.join(out, "log.jsonl"))
        report = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertEqual(report["train_losses"], [])
        self.assertEqual(report["final_validation_loss"], self.report["final_validation_loss"])
        self.assertEqual(report["model_file"], os.path.join(out, "model_00000006.bin"))
        self.assertEqual(self.read(os.path.join(out, "log.jsonl")), before)
        # the same from an earlier checkpoint: the log of the steps after it is not cut away
        report = json.loads(run(self.common + ["--output-dir", out, "--resume", os.path.join(out, "model_00000003.bin"),
                                               "--max-steps", "3", "--json"]).stdout)
        self.assertEqual((report["train_losses"], report["model_file"]), ([], os.path.join(out, "model_00000003.bin")))
        self.assertEqual(self.read(os.path.join(out, "log.jsonl")), before)

    def test_float_flags_must_be_finite(self):
        for flag, value in [("--learning-rate", "nan"), ("--weight-decay", "inf"), ("--max-grad-norm", "1e400")]:
            proc = run(self.common + ["--output-dir", os.path.join(self.tmp, "x"), flag, value], check=False)
            self.assertEqual(proc.returncode, 2)
            self.assertEqual(proc.stderr.strip(), f"nfn_gpt_native_train: error: {flag}: {value} is not a finite number")

    def test_weights_of_another_head_count_are_refused(self):
        proc = run(self.common + ["--output-dir", os.path.join(self.tmp, "heads"), "--num-heads", "4",
                                  "--weights", os.path.join(self.full, "model_00000006.bin")], check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn('weights geometry {"max_seq_len":16,"vocab_size":64,"padded_vocab_size":128,"num_layers":2,'
                      '"num_heads":2,"channels":32} does not match', proc.stderr)

    def test_graph_file_is_read_strictly_and_whole(self):
        manifest = json.loads(self.read(os.path.join(self.full, "manifest.json")))

        def graph(name, **changes):
            m = json.loads(json.dumps(manifest))
            m["geometry"].update(changes.pop("geometry", {}))
            m.update(changes)
            path = os.path.join(self.tmp, name + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(m, f)
            return run(["--graph-file", path, "--train-data", self.data, "--output-dir",
                        os.path.join(self.tmp, "graph_" + name), "--max-steps", "1", "--backend", "cpu"], check=False)
        for name, changes, why in [
                ("fraction", {"geometry": {"num_layers": 2.7}}, "field num_layers is not a whole number in int range (2.7)"),
                ("huge", {"geometry": {"channels": 1e12}}, "field channels is not a whole number in int range"),
                ("family", {"model_family": "llama"}, "model_family llama is not one the dense GPT trainer takes")]:
            proc = graph(name, **changes)
            self.assertEqual(proc.returncode, 2, name)
            self.assertIn(why, proc.stderr)
        # its tokenizer and end-of-text token, where the flags do not name others
        proc = graph("tokenizer", tokenizer="sp64", eot_token=5)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        written = json.loads(self.read(os.path.join(self.tmp, "graph_tokenizer", "manifest.json")))
        self.assertEqual((written["tokenizer"], written["eot_token"]), ("sp64", 5))

    def test_bad_batch_math(self):
        proc = run(self.common + ["--output-dir", os.path.join(self.tmp, "x"), "--train-batch-tokens", "100"],
                   check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr.strip(), "nfn_gpt_native_train: error: --train-batch-tokens 100 is not a "
                                              "multiple of micro-batch x seq_len = 4 x 16 = 64")

    def test_corrupt_and_mismatched_checkpoints(self):
        out = self.interrupted_copy("corrupt")
        model = os.path.join(out, "model_00000003.bin")
        with open(model, "r+b") as f:
            f.truncate(5000)
        proc = run(self.common + ["--output-dir", out, "--resume", "auto"], check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(f"{model}: size 5000 bytes, the header implies", proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)

        # The optimizer state: cut inside its moments, then inside its header.
        for size, message in ((2000, "size 2000 bytes, the header implies"),
                              (100, "truncated: 100 bytes, the header alone is 1024")):
            out = self.interrupted_copy(f"state{size}")
            state = os.path.join(out, "state_00000003_00000.bin")
            with open(state, "r+b") as f:
                f.truncate(size)
            proc = run(self.common + ["--output-dir", out, "--resume", "auto"], check=False)
            self.assertEqual(proc.returncode, 1)
            self.assertIn(f"{state}: {message}", proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)

        other = self.interrupted_copy("mismatch")
        proc = run([a if a != "32" else "64" for a in self.common] + ["--output-dir", other, "--resume", "auto"],
                   check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("checkpoint geometry", proc.stderr)
        self.assertIn("does not match", proc.stderr)

    def test_out_of_memory(self):
        # Address space capped; the trainer alone takes 0.1-0.25 GB (its libraries and threads;
        # OpenBLAS's pool and glibc's arenas would grow with the machine's cores, so they are
        # held to this test's two threads). Under 1.3 GB a 200M-parameter model (3 GiB of f32
        # state) cannot get its block: the line says what and how much. A 113M-parameter one
        # (1.7 GiB) given 0.35 GB more than its block gets the block, then the initial
        # parameters' host buffer (0.45 GB) cannot be had: one line instead of an abort, and no
        # checkpoint marked done. (Measured: 0.15 to 0.55 GB over the block give that line;
        # checkpoints stream through 16 MB, so nothing after the step needs a model-sized
        # host buffer any more.)
        import resource

        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="2", MALLOC_ARENA_MAX="2")

        for dim, message in (("2048", r"error: allocating the model and the activations of micro-batch 4 x 16 "
                                      r"\((\d+\.\d) GiB\): alloc: \d+ bytes failed"),
                             ("1536", r"error: out of host memory \(std::bad_alloc\): a smaller model or "
                                      r"--batch-size needs less")):
            out = os.path.join(self.tmp, f"oom{dim}")
            flags = dict(zip(self.common[::2], self.common[1::2]))
            flags.update({"--model-dim": dim, "--num-layers": "4", "--num-heads": "16", "--max-steps": "1",
                          "--checkpoint-every": "0", "--output-dir": out})
            args = [x for kv in flags.items() for x in kv]
            # The plan's size of the block (f32 on the CPU) is what the run asks for.
            gib = json.loads(run(args + ["--dry-run"]).stdout)["memory_gib"]["f32"]
            limit = 1_300_000_000 if dim == "2048" else int(gib * 2**30) + 350_000_000

            def cap():
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

            proc = subprocess.run([TRAINER] + args, capture_output=True, text=True, timeout=120, preexec_fn=cap,
                                  env=env)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            lines = proc.stderr.strip().splitlines()  # progress lines, then the error
            m = re.match("^nfn_gpt_native_train: " + message + "$", lines[-1])
            self.assertIsNotNone(m, lines[-1])
            self.assertEqual([ln for ln in lines if "error" in ln], lines[-1:])
            if m.groups():
                self.assertEqual(m.group(1), f"{gib:.1f}")
                self.assertEqual(m.group(1), "3.0")  # 200M parameters x 16 bytes, and the activations
            done = [f for f in os.listdir(out) if f.startswith("DONE")] if os.path.isdir(out) else []
            self.assertEqual(done, [])

    def test_missing_op_library(self):
        proc = run(self.common + ["--output-dir", os.path.join(self.tmp, "y"), "--tile-ops-lib", "/nope/libops.so"],
                   check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("/nope/libops.so: cannot load op library", proc.stderr)

    def test_non_finite_loss_keeps_last_good_checkpoint(self):
        out = self.interrupted_copy("nan")
        before = self.read(os.path.join(out, "model_00000003.bin"))
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--learning-rate", "1e30",
                                  "--max-grad-norm", "0"], check=False)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertRegex(proc.stderr, r"step \d+: loss is (NaN|infinite); stopping without writing a checkpoint "
                                      r"\(last good: .*model_00000003\.bin\)")
        self.assertEqual(sorted(f for f in os.listdir(out) if f.startswith("DONE")), ["DONE_00000003"])
        self.assertEqual(self.read(os.path.join(out, "model_00000003.bin")), before)


if __name__ == "__main__":
    unittest.main()
