"""`nfn pipeline --size tiny` end to end: every stage runs, the report card has every section
filled, a kill -9 of the pipeline during SFT followed by a rerun continues SFT from its last
checkpoint (the earlier stages skipped, the killed run's leftover processes stopped), and bad
input is one line with a non-zero exit."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from nfn_probe import PROBE, PY_ROOT, run_nfn

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
STAGES = ["tokenizer", "base", "base-eval", "sft", "rl", "chat-eval", "report"]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def stage_pids(token):
    """Processes whose environment carries the pipeline run's token."""
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if f"NFN_PIPELINE_RUN={token}".encode() in f.read().split(b"\0"):
                    pids.append(int(name))
        except (OSError, ValueError):
            pass
    return pids


class PipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.env = {"NFN_NATIVE_BIN_DIR": BIN_DIR, "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        cls.out = os.path.join(cls.tmp, "run")
        cls.args = ["pipeline", "--size", "tiny", "--backend", "cpu", "--output-dir", cls.out]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_dry_run_is_light_and_names_every_stage(self):
        code, out, err, modules = run_nfn(self.args + ["--dry-run"], env=self.env)
        self.assertEqual(code, 0, err)
        plan = json.loads(out)
        self.assertEqual(list(plan["stages"]), STAGES)
        for stage in ("base", "sft", "rl"):
            argv = plan["stages"][stage][0]
            self.assertEqual(argv[:2], ["nfn", {"base": "train"}.get(stage, stage)])
            self.assertEqual(argv[-2:], ["--resume", "auto"])
            self.assertEqual(argv[argv.index("--output-dir") + 1], os.path.join(self.out, stage))
        self.assertIn("--tasks", plan["stages"]["base-eval"][1])
        # The tokenizer's name is the output directory's own, the same in every stage.
        name = plan["stages"]["tokenizer"][0][plan["stages"]["tokenizer"][0].index("--name") + 1]
        self.assertRegex(name, r"^pipeline-[0-9a-f]{10}$")
        base = plan["stages"]["base"][0]
        self.assertEqual(base[base.index("--tokenizer") + 1], name)
        self.assertFalse([m for m in modules if m.startswith(("numpy", "nfn._native", "nfn.pipeline.run"))])

    def test_bad_input_is_one_line(self):
        for args, want in [(["pipeline", "--depth", "0", "--output-dir", self.tmp], "--depth must be in [1, 64]"),
                           (["pipeline", "--threads", "-1", "--output-dir", self.tmp], "--threads must be >= 0")]:
            code, out, err, _ = run_nfn(args, env=self.env)
            self.assertEqual((code, err.strip().count("\n")), (1, 0), err)
            self.assertIn(want, err)

    def test_runs_end_to_end_and_a_kill_during_sft_continues(self):
        env = dict(os.environ, PYTHONPATH=PY_ROOT, **self.env)
        sft = os.path.join(self.out, "sft")
        log = os.path.join(self.tmp, "first_run.log")
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", PROBE] + self.args, env=env, stdout=subprocess.DEVNULL,
                                    stderr=err)
        while not os.path.exists(os.path.join(sft, "DONE_00000020")):
            if proc.poll() is not None:
                with open(log) as f:
                    self.fail("the pipeline ended before SFT's first checkpoint: " + f.read()[-3000:])
            time.sleep(0.05)
        # kill -9 of the pipeline and of its stage's processes (they carry the run's token).
        token = read_json(os.path.join(self.out, "pipeline", "running.json"))["token"]
        os.kill(proc.pid, signal.SIGKILL)
        for pid in stage_pids(token):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        self.assertFalse(os.path.exists(os.path.join(self.out, "pipeline", "sft.json")))
        # A process the killed run left behind (as a kill of the pipeline alone leaves its trainer)
        # is stopped by the next run before it goes on.
        leftover = subprocess.Popen(["sleep", "600"], env=dict(os.environ, NFN_PIPELINE_RUN=token))

        code, out, err, _ = run_nfn(self.args + ["--json"], env=self.env, timeout=1800)
        self.assertEqual(code, 0, err[-3000:])
        self.assertEqual(leftover.wait(timeout=30), -signal.SIGTERM)
        self.assertIn("stopping 1 process(es) an interrupted run left behind", err)
        summary = json.loads(out)
        stages = summary["stages"]
        self.assertEqual(list(stages), STAGES)
        for name in ("tokenizer", "base", "base-eval"):
            self.assertIn(f"{name}: done before, skipped", err)
        for name, row in stages.items():
            self.assertEqual(row["status"], "done", name)
        # SFT continued from its checkpoint: it did not start over.
        report = read_json(os.path.join(sft, "report.json"))
        self.assertRegex(str(report.get("resumed_from")), r"model_000000[24]0\.bin")
        self.assertIsNotNone(stages["base-eval"]["bits_per_byte"])
        self.assertIsNotNone(stages["base-eval"]["core"])
        self.assertIsNotNone(stages["chat-eval"]["chatcore"])
        self.assertIsNotNone(stages["rl"]["final_mean_reward"])
        # The report card: every section filled, none saying it is missing.
        with open(summary["report"]) as f:
            text = f.read()
        for heading in ("## Summary", "## Model", "## Pretraining", "## Bits per byte", "## CORE", "## SFT",
                        "## RL", "## ChatCORE"):
            self.assertIn(heading + "\n", text)
        for missing in ("not run", "Not measured", "No task scores", "No training run", "No manifest", "(no "):
            self.assertNotIn(missing, text)
        for stage, png in (("base", "loss"), ("sft", "loss"), ("rl", "reward")):
            self.assertIn(f"]({stage}/{png}.png)", text)
            self.assertTrue(os.path.isfile(os.path.join(self.out, stage, f"{png}.png")))
        self.assertRegex(text, r"CORE: -?\d\.\d{4}")
        self.assertRegex(text, r"ChatCORE: -?\d\.\d{4}")
        # The chat model answers through nfn chat, its tokenizer found by name.
        code, out, err, _ = run_nfn(["chat", "--checkpoint", os.path.join(self.out, "rl"), "-p", "3+4",
                                     "--temperature", "0", "--max-new-tokens", "8", "--json"], env=self.env)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["messages"][1]["role"], "assistant")

        # Rerunning with another size is refused; a stage whose input is gone is named.
        code, _, err, _ = run_nfn(["pipeline", "--depth", "4", "--output-dir", self.out], env=self.env)
        self.assertEqual(code, 1)
        self.assertIn("holds a pipeline made with size 'tiny'", err)
        os.remove(os.path.join(self.out, "pipeline", "rl.json"))
        shutil.rmtree(sft)
        code, _, err, _ = run_nfn(self.args, env=self.env)
        self.assertEqual(code, 1, err)
        self.assertIn(f"stage rl: the output of sft is missing ({sft})", err)


if __name__ == "__main__":
    unittest.main()
