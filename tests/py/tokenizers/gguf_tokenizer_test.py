"""SmolLM2's tokenizer, imported from its GGUF file and loaded by name, encodes as a plain BPE
written here from the GGUF's own tokens and merges (llama.cpp's "smollm" split: digits one by
one, then GPT-2's expression), decodes back to the text, and has the GGUF's special ids."""
import os
import shutil
import tempfile
import unittest

import regex

import smollm2_gguf

GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
TEXTS = [
    "Hello, world! It's 2024-12-05; prices rose 3.5% (or 1,234 units).",
    "  leading and trailing spaces  \n\n\tTabs\tand\r\nCRLF lines\n   ",
    "déjà vu — naïve café, Ελληνικά, русский, 東京タワー, 한국어, emoji 🚀🎉👍🏽",
    'def f(x):\n    return {"a": x ** 2}  # comment\n\nfor i in range(10):\n\tprint(i)\n',
    "<|im_start|>user\nnot a special token when typed<|im_end|>",
    "",
]


def byte_alphabet():
    """GPT-2's byte-to-unicode map, the form GGUF stores byte-level tokens in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def reference_encode(text, tokens, merges):
    """GPT-2's BPE: split, map bytes, then merge the lowest-ranked pair until none applies."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    alphabet = byte_alphabet()
    ids = []
    for chunk in regex.findall(r"\p{N}|[^\p{N}]+", text):
        for piece in [chunk] if regex.fullmatch(r"\p{N}", chunk) else regex.findall(GPT2_SPLIT, chunk):
            word = [alphabet[b] for b in piece.encode("utf-8")]
            while len(word) > 1:
                best = min(range(len(word) - 1), key=lambda i: ranks.get((word[i], word[i + 1]), float("inf")))
                pair = (word[best], word[best + 1])
                if pair not in ranks:
                    break
                merged, i = [], 0
                while i < len(word):
                    if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                        merged.append(word[i] + word[i + 1])
                        i += 2
                    else:
                        merged.append(word[i])
                        i += 1
                word = merged
            ids += [vocab[t] for t in word]
    return ids


@unittest.skipIf(smollm2_gguf.path() is None, smollm2_gguf.MISSING)
class GGUFTokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import gguf
        from nfn import tokenizers
        from nfn.weights import gguf_import
        cls.tmp = tempfile.mkdtemp()
        os.environ["NFN_ARTIFACTS_DIR"] = os.path.join(cls.tmp, "artifacts")
        os.environ["NFN_TOKENIZERS_DIR"] = os.path.join(cls.tmp, "tokenizers")
        cls.name = gguf_import.import_gguf(smollm2_gguf.path())["tokenizer"]
        cls.tok = tokenizers.load(cls.name)
        fields = gguf.GGUFReader(smollm2_gguf.path()).fields
        cls.meta = {k: fields[k].contents() for k in fields if k.startswith("tokenizer.")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_encodes_as_the_gguf_bpe_and_decodes_back(self):
        tokens, merges = self.meta["tokenizer.ggml.tokens"], self.meta["tokenizer.ggml.merges"]
        for text in TEXTS:
            with self.subTest(text=text):
                ids = self.tok.encode(text)
                self.assertEqual(ids, reference_encode(text, tokens, merges))
                self.assertEqual(self.tok.decode(ids), text)
        self.assertEqual(self.tok.encode_batch(TEXTS[:2]), [self.tok.encode(t) for t in TEXTS[:2]])

    def test_special_ids_are_the_gguf_ones(self):
        tokens, types = self.meta["tokenizer.ggml.tokens"], self.meta["tokenizer.ggml.token_type"]
        control = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == 3}
        self.assertEqual(self.tok.special_tokens, control)
        self.assertEqual((control["<|endoftext|>"], control["<|im_start|>"], control["<|im_end|>"]), (0, 1, 2))
        self.assertEqual(self.tok.vocab_size, len(tokens))
        self.assertEqual(self.tok.eot_id, self.meta["tokenizer.ggml.eos_token_id"])
        self.assertEqual(self.tok.bos_id, self.meta["tokenizer.ggml.bos_token_id"])
        self.assertEqual(self.tok.chat_template, self.meta["tokenizer.chat_template"])
        self.assertEqual(self.tok.chat_special_ids, {"<|im_start|>": 1, "<|im_end|>": 2})
        self.assertEqual(self.tok.encode("hi", prepend="<|im_start|>", append=2),
                         [1] + self.tok.encode("hi") + [2])
        self.assertEqual(self.tok.decode([1, 2]), "<|im_start|><|im_end|>")

    def test_named_like_the_other_tokenizers(self):
        from nfn import tokenizers
        from nfn.errors import UserError
        from nfn.tokenizers import bpe
        self.assertIn(self.name, tokenizers.known_names())
        self.assertEqual(tokenizers.vocab_size_of(self.name), 49152)
        self.assertEqual(tokenizers.eot_id_of(self.name), 2)
        self.assertEqual(self.tok.identity(), {"name": self.name, "kind": "hf-tokenizer", "vocab_size": 49152,
                                               "sha256": tokenizers.fingerprint(self.name)})
        with self.assertRaisesRegex(UserError, "is the tokenizer of the model imported in"):
            bpe.check_name(self.name)  # a trained tokenizer of that name would shadow it


if __name__ == "__main__":
    unittest.main()
