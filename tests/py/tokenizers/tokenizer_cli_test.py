"""`nfn tokenizer train` and `eval` end to end, in a private tokenizer cache."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

import nfn

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))


def nfn_cli(args, env):
    code = "import sys; from nfn.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=PY_ROOT, **env), timeout=120)


class HeldOutSplitTest(unittest.TestCase):
    def test_tail_is_at_most_a_megabyte_of_utf8_from_a_line_start(self):
        from nfn.cli.tokenizer import split_heldout

        wide = ("日本語のテキスト" * 10 + "\n") * 260_000  # 3 bytes a character, 62 MB
        short = "".join(f"line {i}\n" for i in range(1000))
        for text, most_bytes in [(wide, 1_000_000), (short, len(short) // 20)]:
            train, heldout = split_heldout(text)
            self.assertEqual(train + heldout, text)
            self.assertTrue(train.endswith("\n"))  # the tail starts a line
            self.assertLessEqual(len(heldout.encode()), most_bytes)
            self.assertGreater(len(heldout.encode()), most_bytes - 200)  # less at most a line
        train, heldout = split_heldout("x" * 1000)  # no line break: cut mid-line
        self.assertEqual((len(train), len(heldout)), (950, 50))


class TokenizerCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.env = {"NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "toks")}
        rng = random.Random(0)
        words = "kalomi nerusta povetri xoanel trikalo mipone stavexo ruelka".split()  # not English
        self.text = os.path.join(self.tmp, "text.txt")
        with open(self.text, "w") as f:
            for _ in range(3000):
                f.write(" ".join(rng.choice(words) for _ in range(12)) + "\n")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_train_then_eval(self):
        r = nfn_cli(["tokenizer", "train", "--pretraining-file", self.text, "--vocab-size", "400",
                     "--name", "tiny", "--json"], self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        # 8 distinct words have fewer pairs than 400 - 265 merges: the real size is reported.
        self.assertLess(report["vocab_size"], 400)
        self.assertIn("too few distinct pairs", r.stderr)
        self.assertGreater(report["heldout_chars"], 0)
        d = os.path.join(self.tmp, "toks", "tiny")
        self.assertEqual(sorted(os.listdir(d)), ["bpe.tiktoken", "heldout.txt", "nfn_tokenizer.json"])
        with open(os.path.join(d, "heldout.txt")) as f, open(self.text) as g:
            self.assertTrue(g.read().endswith(f.read()))  # the held-out tail of the text
        from nfn.tokenizers import load  # the registry every --tokenizer NAME goes through
        os.environ["NFN_TOKENIZERS_DIR"] = self.env["NFN_TOKENIZERS_DIR"]
        try:
            tok = load("tiny")
        finally:
            del os.environ["NFN_TOKENIZERS_DIR"]
        self.assertEqual(tok.vocab_size, report["vocab_size"])
        r = nfn_cli(["tokenizer", "eval", "--name", "tiny", "--json"], self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        ev = json.loads(r.stdout)
        mine, gpt2 = ev["results"]
        self.assertEqual((mine["tokenizer"], gpt2["tokenizer"], gpt2["vocab_size"]), ("tiny", "gpt2", 50257))
        self.assertAlmostEqual(mine["bytes_per_token"], ev["bytes"] / mine["tokens"], places=3)
        # Each made-up word is one token here and several for gpt2.
        self.assertGreater(mine["bytes_per_token"], gpt2["bytes_per_token"])

    def test_errors_are_one_line(self):
        cases = [
            (["--pretraining-file", os.path.join(self.tmp, "absent.txt"), "--vocab-size", "300",
              "--name", "x"], "no such file or directory"),
            (["--pretraining-file", self.text, "--vocab-size", "100", "--name", "x"], "at least 265"),
            (["--pretraining-file", self.text, "--vocab-size", "300", "--name", "../x"], "--name"),
            (["--pretraining-file", self.text, "--vocab-size", "300", "--name", "gpt2"],
             "--name gpt2 is a built-in tokenizer's"),
            (["--pretraining-file", self.text, "--vocab-size", "300", "--name", "sp1024"],
             "--name sp1024 is a built-in tokenizer's"),
            (["--pretraining-file", self.text, "--vocab-size", str(10**10), "--name", "x"], "at most 4294967295"),
        ]
        for args, needle in cases:
            r = nfn_cli(["tokenizer", "train"] + args, self.env)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(needle, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "toks", "x")))
        r = nfn_cli(["tokenizer", "eval", "--name", "absent"], self.env)
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("nfn tokenizer: error: unknown tokenizer 'absent'"), r.stderr)

    def test_a_folder_of_text_as_data_prepare_reads_it(self):
        # .txt files only in a subfolder are found (recursively, as `nfn data prepare` finds
        # them); a dangling link among them is one line naming it.
        folder = os.path.join(self.tmp, "corpus")
        os.makedirs(os.path.join(folder, "deeper"))
        shutil.copy(self.text, os.path.join(folder, "deeper", "a.txt"))
        r = nfn_cli(["tokenizer", "train", "--pretraining-file", folder, "--vocab-size", "300", "--name", "nested"],
                    self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.symlink(os.path.join(self.tmp, "gone.txt"), os.path.join(folder, "gone.txt"))
        r = nfn_cli(["tokenizer", "train", "--pretraining-file", folder, "--vocab-size", "300", "--name", "y"],
                    self.env)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), f"nfn tokenizer: error: {folder}/gone.txt: not a regular file")

    def test_a_folder_being_written_is_not_a_tokenizer(self):
        # What a killed `tokenizer train` leaves (.NAME.tmp-*, manifest included) is not listed.
        r = nfn_cli(["tokenizer", "train", "--pretraining-file", self.text, "--vocab-size", "300", "--name", "x"],
                    self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        toks = os.path.join(self.tmp, "toks")
        shutil.copytree(os.path.join(toks, "x"), os.path.join(toks, ".x.tmp-abc123"))
        r = nfn_cli(["data", "tokenizers", "--json"], self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(".x.tmp-abc123", r.stdout)
        self.assertIn('"x"', r.stdout)


if __name__ == "__main__":
    unittest.main()
