"""`nfn rl` end to end on two CPU cores: a chat tokenizer and a tiny nanochat trained here, then
SFT on the arithmetic task's training questions, each answered twice, "#### N" (what the reward
reads) and "= N" (which it does not), so that the model answers in both and some answers are
right; then RL on them: the mean reward rises over a few dozen steps (seeded); a run whose last
checkpoint is gone, or one killed with SIGKILL mid-run, continued with --resume auto ends with the
uninterrupted run's files byte for byte; its output directory is a checkpoint `nfn chat` takes;
bad input is one line and a non-zero exit."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from nfn.rl import tasks
from nfn_probe import PROBE, PY_ROOT, run_nfn

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))


class RlCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.env = {"NFN_NATIVE_BIN_DIR": BIN_DIR, "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        os.environ.update(cls.env)
        rng = random.Random(0)
        train = tasks.load("arithmetic", "train")
        corpus = os.path.join(cls.tmp, "corpus.txt")
        with open(corpus, "w") as f:
            for _ in range(3000):
                row = train[rng.randrange(len(train))]
                f.write(f"{row['question']} #### {row['answer']}\n")
        sft_data = os.path.join(cls.tmp, "arithmetic.jsonl")
        with open(sft_data, "w") as f:
            for i in range(len(train)):
                question, answer = train[i]["messages"][0], train[i]["answer"]
                f.write(json.dumps(train[i]["messages"]) + "\n")
                f.write(json.dumps([question, {"role": "assistant", "content": f"= {answer}"}]) + "\n")
        cls.nfn(["tokenizer", "train", "--pretraining-file", corpus, "--vocab-size", "300", "--name", "chat"])
        base = os.path.join(cls.tmp, "base")
        cls.nfn(["train", "--model-family", "nanochat", "--pretraining-file", corpus, "--tokenizer", "chat",
                 "--num-layers", "2", "--model-dim", "64", "--num-heads", "1", "--train-seq-len", "32",
                 "--batch-size", "8", "--max-steps", "40", "--sample-tokens", "0", "--output-dir", base] + cls.cpu)
        cls.sft = os.path.join(cls.tmp, "sft")
        cls.nfn(["sft", "--init-from", base, "--mixture", f"identity:{sft_data}", "--output-dir", cls.sft,
                 "--batch-size", "8", "--max-steps", "150", "--sample-tokens", "0"] + cls.cpu)

    cpu = ["--backend", "cpu", "--threads", "1"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    @classmethod
    def nfn(cls, args, code=0):
        got, out, err, _ = run_nfn(args, env=cls.env, timeout=900)
        if got != code:
            raise AssertionError(f"nfn {' '.join(args)}: exit {got}, expected {code}: {err}")
        return out, err

    def rl(self, out, *extra):
        return ["rl", "--init-from", self.sft, "--output-dir", out, "--task", "arithmetic", "--samples", "8",
                "--examples-per-step", "8", "--max-new-tokens", "8", "--threads", "1", "--eval-examples", "40"] + \
            list(extra)

    def test_rl_raises_the_mean_reward(self):
        out = os.path.join(self.tmp, "rl")
        report = json.loads(self.nfn(self.rl(out, "--steps", "60", "--init-lr-frac", "0.2", "--eval-every", "60",
                                             "--json", "--seed", "1"))[0])
        rewards = [r for _, r in report["mean_rewards"]]
        self.assertEqual(len(rewards), 60)
        # Means over 15 steps of 64 samples each (the questions differ from step to step).
        first, last = sum(rewards[:15]) / 15, sum(rewards[-15:]) / 15
        self.assertGreater(first, 0.1, rewards)  # SFT made the reward reachable
        self.assertGreater(last, first + 0.05, rewards)
        self.assertGreater(report["sample_tokens_per_s"], 0)
        with open(report["log_file"]) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([x["step"] for x in lines], list(range(1, 61)))
        self.assertIn("pass_at_1", lines[-1])
        self.assertTrue(all("sample_tokens_per_s" in x and "mean_reward" in x for x in lines))
        # The output directory is a checkpoint nfn chat answers with.
        reply = json.loads(self.nfn(["chat", "--checkpoint", out, "-p", "3+4", "--temperature", "0", "--json",
                                     "--backend", "cpu"])[0])
        self.assertEqual(reply["messages"][1]["role"], "assistant")

    def test_resume_auto_continues_bit_for_bit(self):
        whole, cut = os.path.join(self.tmp, "whole"), os.path.join(self.tmp, "cut")
        args = ("--steps", "4", "--checkpoint-every", "2", "--eval-every", "0", "--init-lr-frac", "0.5")
        self.nfn(self.rl(whole, *args))
        shutil.copytree(whole, cut)
        for name in ("DONE_00000004", "model_00000004.bin", "state_00000004_00000.bin"):
            os.remove(os.path.join(cut, name))  # as a kill after step 2's checkpoint leaves it
        _, err = self.nfn(self.rl(cut, *args, "--resume", "auto"))
        for name in ("model_00000004.bin", "state_00000004_00000.bin"):
            with open(os.path.join(whole, name), "rb") as a, open(os.path.join(cut, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        with open(os.path.join(whole, "log.jsonl")) as a, open(os.path.join(cut, "log.jsonl")) as b:
            strip = lambda lines: [{k: v for k, v in json.loads(x).items() if "per_s" not in k} for x in lines]
            self.assertEqual(strip(a), strip(b))

    def test_a_kill_9_mid_run_resumes_bit_for_bit(self):
        # A run killed at whatever point it reached after its first checkpoint (perhaps in the middle
        # of writing a later one), then --resume auto, ends as the uninterrupted run ends.
        whole, killed = os.path.join(self.tmp, "whole9"), os.path.join(self.tmp, "killed9")
        args = ("--steps", "40", "--checkpoint-every", "5", "--eval-every", "0", "--quiet")
        self.nfn(self.rl(whole, *args))
        proc = subprocess.Popen([sys.executable, "-c", PROBE] + self.rl(killed, *args),
                                env=dict(os.environ, PYTHONPATH=PY_ROOT), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(killed, "DONE_00000005")) and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(), -signal.SIGKILL)  # killed, not finished
        self.assertFalse(os.path.exists(os.path.join(killed, "DONE_00000040")))
        _, err = self.nfn(self.rl(killed, *args, "--resume", "auto"))
        for name in ("model_00000040.bin", "state_00000040_00000.bin"):
            with open(os.path.join(whole, name), "rb") as a, open(os.path.join(killed, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_bad_input_is_one_line(self):
        out = os.path.join(self.tmp, "bad")
        _, err = self.nfn(self.rl(out, "--samples", "0"), code=1)
        self.assertEqual(err.strip().splitlines(), ["nfn rl: error: --samples 0: must be at least 2 (the advantages "
                                                    "are rewards minus the group's mean)"])
        _, err = self.nfn(["rl", "--output-dir", out], code=1)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("--init-from is required", err)
        _, err = self.nfn(["rl", "--init-from", os.path.join(self.tmp, "nowhere"), "--output-dir", out], code=1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("nowhere", err)
        # A checkpoint whose tokenizer has no chat tokens.
        plain = os.path.join(self.tmp, "plain")
        shutil.copytree(self.sft, plain)
        for name in os.listdir(plain):
            if name == "manifest.json" or name.startswith("DONE_"):
                path = os.path.join(plain, name)
                with open(path) as f:
                    manifest = json.load(f)
                manifest["tokenizer"] = "gpt2"
                with open(path, "w") as f:
                    json.dump(manifest, f)
        _, err = self.nfn(["rl", "--init-from", plain, "--output-dir", out], code=1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("tokenizer gpt2 has no chat format", err)
        self.assertFalse(os.path.exists(os.path.join(out, "DONE_00000000")))


if __name__ == "__main__":
    unittest.main()
