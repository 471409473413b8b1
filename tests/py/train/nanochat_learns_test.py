"""`nfn train --model-family nanochat --depth 4` on the embedded corpus (Shakespeare, sp1024)
learns in seconds on two CPU cores: after 60 steps of 2,048 tokens, the validation loss is
more than a nat below the unigram entropy of the training tokens (what a model that knows only
token frequencies reaches)."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np
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
             "--no-checkpoint", "--sample-tokens", "0", "--threads", "2", "--json"], env=env, timeout=1200)
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual((report["geometry"]["channels"], report["geometry"]["num_heads"]), (256, 2))
        entropy = unigram_entropy(report["config"]["data"]["train"])
        self.assertGreater(entropy, 5.0)
        self.assertLess(report["final_validation_loss"], entropy - 1.0,
                        f"validation {report['final_validation_loss']:.3f} against unigram entropy {entropy:.3f}")


if __name__ == "__main__":
    unittest.main()
