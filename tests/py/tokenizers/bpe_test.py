"""The chat BPE tokenizer: its encodings agree with a plain-Python BPE written here, and the
contracts the chat pipeline relies on hold (batch order, prepend/append, token bytes,
round trips of any text and any bytes, files that are validated when read)."""
import base64
import json
import os
import random
import shutil
import tempfile
import unittest

import regex

from nfn.errors import UserError
from nfn.tokenizers import bpe

WORDS = ("the quick brown fox jumps over the lazy dog while a 1234 and 56 things happen; "
         "Don't stop, we've said it's fine! résumé naïve café 東京 😀 ").split()


def corpus(n_words=30000, seed=0):
    """Real-looking words plus syllable words, so that hundreds of merges exist."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sta", "po", "ve", "tri", "xo", "an", "el"]
    lines = []
    for _ in range(n_words // 10):
        words = [rng.choice(WORDS) if rng.random() < 0.5 else
                 "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(10)]
        lines.append(" ".join(words))
    return "\n".join(lines)


def reference_encode(text, ranks):
    """BPE as the algorithm defines it: pre-split with the regex, then repeatedly merge the
    adjacent pair whose merged bytes have the lowest rank."""
    out = []
    for piece in regex.findall(bpe.SPLIT_PATTERN, text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1),
                       key=lambda i: ranks.get(parts[i] + parts[i + 1], float("inf")))
            merged = parts[best] + parts[best + 1]
            if merged not in ranks:
                break
            parts[best:best + 2] = [merged]
        out.extend(ranks[p] for p in parts)
    return out


class TrainedTokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp()
        cls.dir = bpe.train(corpus().splitlines(), 400, "t400", cls.root, heldout="held out\n")
        cls.tok = bpe.load_trained(cls.dir)
        cls.ranks = {}
        with open(os.path.join(cls.dir, bpe.RANKS_FILE)) as f:
            for line in f:
                b64, rank = line.split()
                cls.ranks[base64.b64decode(b64)] = int(rank)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)

    def test_manifest_and_special_tokens(self):
        with open(os.path.join(self.dir, bpe.MANIFEST)) as f:
            m = json.load(f)
        self.assertEqual((m["kind"], m["name"], m["vocab_size"]), ("bpe", "t400", 400))
        self.assertEqual(self.tok.vocab_size, 400)
        self.assertEqual(len(self.ranks), 400 - 9)
        self.assertEqual(list(self.tok.special_tokens), bpe.SPECIAL_TOKENS)
        self.assertEqual(sorted(self.tok.special_tokens.values()), list(range(391, 400)))
        self.assertEqual(self.tok.eot_id, self.tok.special_id("<|bos|>"))
        ident = self.tok.identity()
        # The fingerprint a dataset cache entry is checked against: the manifest and the ranks
        # (not the held-out text), so an entry made with this tokenizer is found again.
        from unittest import mock
        from nfn import paths, tokenizers
        with mock.patch.object(paths, "tokenizers_dir", return_value=self.root):
            self.assertEqual(tokenizers.model_files("t400"),
                             sorted(os.path.join(self.dir, f) for f in (bpe.MANIFEST, bpe.RANKS_FILE)))
            self.assertEqual(ident["sha256"], tokenizers.fingerprint("t400"))
        self.assertEqual(len(ident["sha256"]), 64)
        with open(os.path.join(self.dir, bpe.HELDOUT_FILE)) as f:
            self.assertEqual(f.read(), "held out\n")

    def test_matches_reference_bpe(self):
        texts = [corpus(500, seed=s) for s in range(1, 4)] + [
            "Hello, World! It's 2024-11-30.\n\n  indented\tand   spaced  ",
            "numbers 1 22 333 4444 55555", "😀😀 東京タワー 𠀀𠀁 e\u0301", ""]
        for text in texts:
            self.assertEqual(self.tok.encode(text), reference_encode(text, self.ranks), text[:40])

    def test_training_learned_merges(self):
        # "the" is frequent in the corpus: it must be a single token, " the" too.
        self.assertEqual(len(self.tok.encode("the")), 1)
        self.assertEqual(len(self.tok.encode(" the")), 1)

    def test_batch_is_ordered_and_independent(self):
        texts = [f"text number {i} " * (i % 7 + 1) for i in range(50)]
        batch = self.tok.encode_batch(texts)
        self.assertEqual(batch, [self.tok.encode(t) for t in texts])
        batch[0].append(-1)
        self.assertNotIn(-1, batch[1])
        self.assertEqual(self.tok.encode_batch([]), [])
        with self.assertRaises(TypeError):
            self.tok.encode_batch(["ok", 3])

    def test_prepend_and_append(self):
        bos, end = self.tok.special_id("<|bos|>"), self.tok.special_id("<|assistant_end|>")
        body = self.tok.encode("hi there")
        self.assertEqual(self.tok.encode("hi there", prepend="<|bos|>"), [bos] + body)
        self.assertEqual(self.tok.encode("hi there", prepend=bos, append=end), [bos] + body + [end])
        self.assertEqual(self.tok.encode("hi there", append=65), body + [65])
        batch = self.tok.encode_batch(["a", "b"], prepend="<|bos|>", append=end)
        self.assertEqual(batch, [[bos] + self.tok.encode("a") + [end], [bos] + self.tok.encode("b") + [end]])
        for bad in ("<|nope|>",):
            with self.assertRaises(KeyError):
                self.tok.encode("x", prepend=bad)
        for bad in (-1, 400, True, 1.5):
            with self.assertRaises(ValueError):
                self.tok.encode("x", append=bad)

    def test_special_text_is_not_special(self):
        ids = self.tok.encode("<|bos|><|user_start|>")
        self.assertFalse(any(self.tok.is_special(i) for i in ids))
        self.assertEqual(self.tok.decode(ids), "<|bos|><|user_start|>")

    def test_token_bytes(self):
        for b in range(256):
            self.assertEqual(self.tok.token_bytes(self.ranks[bytes([b])]), bytes([b]))
        for token, rank in list(self.ranks.items())[256:]:
            self.assertEqual(self.tok.token_bytes(rank), token)
        self.assertEqual(self.tok.token_bytes(self.tok.special_id("<|python_start|>")), b"<|python_start|>")
        for bad in (-1, 400):
            with self.assertRaises(ValueError):
                self.tok.token_bytes(bad)

    def test_round_trips(self):
        for text in ["😀 family 👨‍👩‍👧 flags 🇫🇷", "CJK ext B: 𠀀𠀋𠂤𪜀 and 漢字", "\x00\x01 ctl \r\n",
                     "mixed résumé — “quotes” …", corpus(300, seed=9)]:
            self.assertEqual(self.tok.decode(self.tok.encode(text)), text)
        rng = random.Random(5)
        for n in (0, 1, 7, 100, 1000):
            data = bytes(rng.randrange(256) for _ in range(n))
            ids = self.tok.encode_bytes(data)
            self.assertEqual(self.tok.decode_bytes(ids), data)
            self.assertTrue(all(0 <= i < 391 for i in ids))
        # Valid UTF-8 gets the same ids through either door.
        self.assertEqual(self.tok.encode_bytes("héllo 😀".encode()), self.tok.encode("héllo 😀"))
        # A token that ends mid-character decodes to U+FFFD, never raises.
        self.assertEqual(self.tok.decode([self.ranks[b"\xf0"]]), "\ufffd")


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.dir = bpe.train(corpus(2000).splitlines(), 300, "small", self.root)

    def tearDown(self):
        shutil.rmtree(self.root)

    def edit_manifest(self, **changes):
        path = os.path.join(self.dir, bpe.MANIFEST)
        with open(path) as f:
            m = json.load(f)
        m.update(changes)
        with open(path, "w") as f:
            json.dump(m, f)
        return path

    def assert_rejected(self, *needles):
        with self.assertRaises(UserError) as ctx:
            bpe.load_trained(self.dir)
        for needle in needles:
            self.assertIn(needle, str(ctx.exception))

    def test_bad_manifest_fields_are_named(self):
        path = self.edit_manifest(vocab_size=301)
        self.assert_rejected(path, "'vocab_size'")
        self.edit_manifest(vocab_size=300, kind="sentencepiece")
        self.assert_rejected("'kind'")
        self.edit_manifest(kind="bpe", format=2)
        self.assert_rejected("'format'")
        self.edit_manifest(format=1, special_tokens={"<|bos|>": 291})
        self.assert_rejected("'special_tokens'")

    def test_mistyped_fields_are_named_not_raised(self):
        with open(os.path.join(self.dir, bpe.MANIFEST)) as f:
            good = json.load(f)
        special = good["special_tokens"]
        as_text = dict(special, **{"<|bos|>": str(special["<|bos|>"])})
        as_float = dict(special, **{"<|bos|>": float(special["<|bos|>"])})
        for change, needle in [({"special_tokens": as_text}, "'special_tokens': '<|bos|>'"),
                               ({"special_tokens": as_float}, "'special_tokens': '<|bos|>'"),
                               ({"files": {"ranks": ""}}, "'files.ranks'"),
                               ({"files": {"ranks": "."}}, "'files.ranks'"),
                               ({"files": {"ranks": ".."}}, "'files.ranks'"),
                               ({"pattern": "("}, "'pattern' does not compile")]:
            self.edit_manifest(**good)
            self.edit_manifest(**change)
            self.assert_rejected(needle)
        self.edit_manifest(**good)
        self.assertEqual(bpe.load_trained(self.dir).vocab_size, good["vocab_size"])

    def test_bad_ranks_file_names_the_line(self):
        path = os.path.join(self.dir, bpe.RANKS_FILE)
        with open(path) as f:
            lines = f.readlines()
        lines[260] = "not-base64!! 260\n"
        with open(path, "w") as f:
            f.writelines(lines)
        self.assert_rejected(path, "line 261")

    def test_missing_directory(self):
        with self.assertRaises(UserError) as ctx:
            bpe.load_trained(os.path.join(self.root, "absent"))
        self.assertIn("nfn tokenizer train", str(ctx.exception))

    def test_retrain_replaces_atomically(self):
        before = bpe.load_trained(self.dir).identity()
        bpe.train(corpus(2000, seed=3).splitlines(), 280, "small", self.root)
        after = bpe.load_trained(self.dir)
        self.assertEqual(after.vocab_size, 280)
        self.assertNotEqual(before["sha256"], after.identity()["sha256"])
        self.assertEqual(os.listdir(self.root), ["small"])  # no temp or old directories left

    def test_a_reader_loads_the_old_or_the_new_while_it_is_retrained(self):
        # Another process loads the tokenizer by name again and again while it is replaced, in
        # turn, by two trainings: every load finds it, and each is wholly one of the two
        # (its identity is one of theirs: never one training's manifest with the other's ranks).
        import subprocess
        import sys
        import nfn
        other_root = os.path.join(self.root, "other")
        other = bpe.train(corpus(2000, seed=3).splitlines(), 280, "small", other_root)
        versions = []
        for d in (self.dir, other):
            files = {}
            for name in (bpe.MANIFEST, bpe.RANKS_FILE):
                with open(os.path.join(d, name), encoding="utf-8", newline="") as f:
                    files[name] = f.read()
            versions.append(files)
        known = sorted(bpe.load_trained(d).identity()["sha256"] for d in (self.dir, other))
        stop = os.path.join(self.root, "other", "stop")
        reader = ("import json, os, sys\nfrom nfn import tokenizers\nfrom nfn.errors import UserError\n"
                  "loads, errors, seen = 0, [], set()\n"
                  "tokenizers.load('small')\nprint('ready', flush=True)\n"
                  "while not os.path.exists(sys.argv[1]):\n"
                  "    try:\n        seen.add(tokenizers.load('small').identity()['sha256'])\n        loads += 1\n"
                  "    except UserError as e:\n        errors.append(str(e))\n"
                  "print(json.dumps({'loads': loads, 'errors': errors[:3], 'seen': sorted(seen)}))\n")
        env = dict(os.environ, NFN_TOKENIZERS_DIR=self.root,
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__))))
        proc = subprocess.Popen([sys.executable, "-c", reader, stop], env=env, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(proc.stdout.readline(), "ready\n")
            for i in range(300):
                bpe.save_atomically(self.root, "small", versions[i % 2], quiet=True)
        finally:
            open(stop, "w").close()
            got = json.loads(proc.communicate(timeout=60)[0])
        self.assertGreater(got["loads"], 0)
        self.assertEqual(got["errors"], [])
        self.assertLessEqual(set(got["seen"]), set(known))
        self.assertEqual(sorted(os.listdir(self.root)), ["other", "small"])

    def test_small_corpus_gives_the_vocabulary_it_can(self):
        # Fewer distinct pairs than requested merges: the manifest states the real size.
        d = bpe.train(["abab abab"], 300, "tiny", self.root)
        tok = bpe.load_trained(d)
        self.assertLess(tok.vocab_size, 300)
        self.assertEqual(tok.decode(tok.encode("abab")), "abab")

    def test_bad_arguments(self):
        with self.assertRaises(UserError):
            bpe.train(["abc"], 200, "x", self.root)
        for name in ("", "..", "a/b", ".hidden"):
            with self.assertRaises(UserError):
                bpe.train(["abc"], 300, name, self.root)


if __name__ == "__main__":
    unittest.main()
