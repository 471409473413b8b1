"""Untrained models score at the baseline: a GPT-2-initialized GPT (gpt2 tokenizer) on CORE's
tasks whose baseline is chance, and a nanochat-initialized nanochat model (a chat BPE trained
here) on ChatCORE's letter choices. The tolerance is four standard errors of a chance guesser,
4 sqrt(b (1 - b) / n), on n items; language-modelling tasks (baseline 0) score exactly 0.

Not here: BoolQ's baseline is the majority answer (62% "yes"), not chance; HellaSwag 10-shot,
SQuAD and CoQA only for time (their prompts are the longest)."""
import json
import math
import os
import shutil
import tempfile
import unittest

import numpy as np
from safetensors.numpy import save_file

from nfn import _native
from nfn_probe import run_nfn

CHANCE_TASKS = ["hellaswag-zeroshot", "arc-easy", "arc-challenge", "copa", "commonsenseqa", "piqa", "openbookqa",
                "winogrande"]
LM_TASKS = ["lambada", "jeopardy"]
N = 200

NANOCHAT = dict(family="nanochat", max_seq_len=1024, vocab_size=512, padded_vocab_size=512, num_layers=2,
                num_heads=2, num_kv_heads=2, head_dim=32, channels=64, hidden=256)


def within_chance(test, name, result):
    n, b = result["items"], result["baseline"]
    bound = 4 * math.sqrt(b * (1 - b) / n)
    test.assertLessEqual(abs(result["accuracy"] - b), bound, f"{name}: {result['accuracy']:.3f} vs {b} +- {bound:.3f}")


class RandomBaselineTest(unittest.TestCase):
    def test_gpt_on_core(self):
        from nfn import tokenizers
        from nfn.evals import suite
        params = _native.gpt_random_parameters(1024, 50257, 2, 2, 32, 7)  # GPT-2's init: std 0.02
        engine = _native.InferenceEngine(params, 1024, 50257, 2, 2, 32, 50304, threads=1)
        runner = suite.Runner(engine, tokenizers.load("gpt2", quiet=True), None)
        for name in CHANCE_TASKS + LM_TASKS:
            task = suite.TASKS[name]
            result = runner.run(task, task.load(), N if name in CHANCE_TASKS else 100, progress=False)
            print(f"{name}: {result['accuracy']:.3f} (baseline {task.baseline})")
            if name in CHANCE_TASKS:
                within_chance(self, name, result)
            else:
                self.assertEqual(result["accuracy"], 0.0, name)

    def test_nanochat_on_chat_choices(self):
        from nfn import tokenizers
        from nfn.chat.formats import chat_format
        from nfn.evals import suite
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        env = {"NFN_TOKENIZERS_DIR": os.path.join(tmp, "tokenizers"), "NFN_DATASETS_DIR": os.path.join(tmp, "data")}
        code, _, err, _ = run_nfn(["tokenizer", "train", "--dataset", "shakespeare", "--vocab-size", "512",
                                   "--name", "chat512"], env=env)
        self.assertEqual(code, 0, err)
        os.environ.update(env)
        tok = tokenizers.load("chat512")
        cfg = NANOCHAT
        layout = _native.NativeDecoder(**cfg, window_pattern="L").layout()
        flat = _native.decoder_random_parameters(cfg["family"], cfg["max_seq_len"], cfg["vocab_size"],
                                                 cfg["padded_vocab_size"], cfg["num_layers"], cfg["num_heads"],
                                                 cfg["num_kv_heads"], cfg["head_dim"], cfg["channels"], cfg["hidden"], 3)
        tensors = {name: np.array(flat[o:o + r * c]).reshape((r, c) if r > 1 else (c,)) for name, r, c, o in layout}
        geometry = {k: cfg[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                        "num_kv_heads", "head_dim", "channels")}
        geometry.update(mlp_hidden=cfg["hidden"], rope_theta=100000.0, window_pattern="L", tied_head=False)
        path = os.path.join(tmp, "model.safetensors")
        save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": "nanochat",
                                           "geometry": json.dumps(geometry)})
        engine = _native.InferenceEngine(weights_file=path, threads=1)
        runner = suite.Runner(engine, tok, chat_format(tok, "chat512"))
        for name in ("chat-arc-easy", "chat-arc-challenge", "mmlu"):
            task = suite.TASKS[name]
            result = runner.run(task, task.load(), N, progress=False)
            print(f"{name}: {result['accuracy']:.3f} (baseline {task.baseline})")
            within_chance(self, name, result)


if __name__ == "__main__":
    unittest.main()
