"""Real scores: SmolLM2-135M-Instruct (imported from its GGUF file here) on fixed 50-item subsets,
the first 50 of each task's order, as `nfn eval --tasks ... --max-per-task 50` scores them:
HellaSwag zero-shot as CORE's multiple choice (continuation likelihood), ARC-Easy and MMLU as
ChatCORE's letter choices in SmolLM2's ChatML. The counts were measured once (docs/evaluation.md);
a change of the engine's arithmetic may move a near tie, so each may move by two items.

One class a Bazel target (the name is the test's argument), each under a minute on two cores."""
import os
import shutil
import sys
import tempfile
import time
import unittest

import smollm2_gguf
from nfn_probe import run_nfn

# (task, first, stop) of the task's order: items right, measured (threads 1, context 2048).
MEASURED = {("hellaswag-zeroshot", 0, 50): 19, ("chat-arc-easy", 0, 50): 15, ("mmlu", 0, 50): 11}


class SmolLM2Scores:
    parts = ()

    @classmethod
    def setUpClass(cls):
        gguf = smollm2_gguf.path()
        if gguf is None:
            raise unittest.SkipTest(smollm2_gguf.MISSING)
        cls.tmp = tempfile.mkdtemp()
        os.environ["NFN_ARTIFACTS_DIR"] = os.path.join(cls.tmp, "artifacts")
        os.environ["NFN_NATIVE_BIN_DIR"] = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
        code, _, err, _ = run_nfn(["import", "--gguf", gguf, "--name", "smollm2"])
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_scores(self):
        from nfn import tokenizers
        from nfn.chat.formats import chat_format
        from nfn.evals import suite
        from nfn.infer import model as model_lib

        class Args:
            checkpoint, weights, graph_file, tokenizer = "smollm2", None, None, None
        m = model_lib.load(Args())
        tok = tokenizers.load(m.tokenizer, quiet=True)
        engine, _ = model_lib.start_engine(m, "cpu", threads=1, context=2048)
        runner = suite.Runner(engine, tok, chat_format(tok, m.tokenizer))
        for part in self.parts:
            name, first, stop = part
            task = suite.TASKS[name]
            data = task.load()
            started = time.time()
            right = sum(int(runner.item(task, data, i)[0]) for i in suite.order(len(data), stop)[first:])
            print(f"{name} items {first}..{stop - 1}: {right} right in {time.time() - started:.1f} s", file=sys.stderr)
            self.assertLessEqual(abs(right - MEASURED[part]), 2, part)


class HellaSwag(SmolLM2Scores, unittest.TestCase):
    parts = (("hellaswag-zeroshot", 0, 50),)


class ArcEasyMMLU(SmolLM2Scores, unittest.TestCase):
    parts = (("chat-arc-easy", 0, 50), ("mmlu", 0, 50))


if __name__ == "__main__":
    unittest.main()
