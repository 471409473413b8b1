"""`nfn train --model-family nanochat --depth 4` on the embedded corpus (Shakespeare, sp1024)
learns in seconds on two CPU cores: after 60 steps of 2,048 tokens, the validation loss is
more than a nat below the unigram entropy of the training tokens (what a model that knows only
token frequencies reaches). The checkpoint then runs through `nfn infer` and `nfn eval` with the
KV-cached engine: greedy text equals the float64 PyTorch reference's continuation on the same
weights, and the evaluated loss shows the same learning."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import load_file

from decoder_reference import nanochat_logits, split
from nfn import _native
from nfn_probe import run_nfn

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))


def unigram_entropy(shard):
    tokens = np.fromfile(shard, dtype=np.uint16)[512:]  # after the 256 int32 header words
    p = np.bincount(tokens).astype(np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


class NanochatLearnsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_depth_4_learns_on_shakespeare(self):
        env = {"NFN_NATIVE_BIN_DIR": BIN_DIR, "NFN_ARTIFACTS_DIR": os.path.join(self.tmp, "artifacts"),
               "NFN_DATASETS_DIR": os.path.join(self.tmp, "datasets"),
               "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tokenizers")}
        code, out, err, _ = run_nfn(
            ["train", "--model-family", "nanochat", "--depth", "4", "--train-seq-len", "256", "--batch-size", "8",
             "--train-batch-tokens", "2048", "--max-steps", "60", "--eval-every-steps", "60", "--eval-batches", "8",
             "--output-dir", os.path.join(self.tmp, "run"), "--sample-tokens", "0", "--threads", "2", "--json"],
            env=env, timeout=1200)
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual((report["geometry"]["channels"], report["geometry"]["num_heads"]), (256, 2))
        entropy = unigram_entropy(report["config"]["data"]["train"])
        self.assertGreater(entropy, 5.0)
        self.assertLess(report["final_validation_loss"], entropy - 1.0,
                        f"validation {report['final_validation_loss']:.3f} against unigram entropy {entropy:.3f}")
        self.check_infer(env, report["geometry"])
        code, out, err, _ = run_nfn(["eval", "--checkpoint", os.path.join(self.tmp, "run"), "--max-tokens", "4096",
                                     "--backend", "cpu", "--json"], env=env)
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertLess(result["loss"], entropy - 1.0)
        self.assertGreater(result["bits_per_byte"], 0)

    def check_infer(self, env, geometry):
        code, out, err, _ = run_nfn(["infer", "--checkpoint", os.path.join(self.tmp, "run"), "--prompt", "ROMEO:",
                                     "--temperature", "0", "--max-new-tokens", "12", "--backend", "cpu", "--json"],
                                    env=env)
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        cfg = dict(family="nanochat", max_seq_len=geometry["max_seq_len"], vocab_size=geometry["vocab_size"],
                   padded_vocab_size=geometry["padded_vocab_size"], num_layers=geometry["num_layers"],
                   num_heads=geometry["num_heads"], num_kv_heads=geometry["num_kv_heads"],
                   head_dim=geometry["head_dim"], channels=geometry["channels"], hidden=geometry["mlp_hidden"],
                   window_pattern=geometry["window_pattern"])
        layout = _native.NativeDecoder(**cfg).layout()
        tensors = load_file(result["checkpoint"])
        p = split(torch.cat([torch.tensor(tensors[name], dtype=torch.float64).reshape(-1)
                             for name, _, _, _ in layout]), layout)
        seq = list(result["prompt_tokens"])
        for _ in range(len(result["generated_tokens"])):
            logits = nanochat_logits(p, torch.tensor([seq]).long(), cfg)[0, -1, :cfg["vocab_size"]]
            seq.append(int(torch.argmax(logits)))
        self.assertEqual(result["generated_tokens"], seq[len(result["prompt_tokens"]):])
        self.assertGreater(len(result["generated_tokens"]), 1)


if __name__ == "__main__":
    unittest.main()
