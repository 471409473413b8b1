"""GPT-2's tokenizer: tiktoken's byte-level BPE built from local files, no network."""
import os

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from nfn.errors import UserError
from nfn.tokenizers import GPT2_VOCAB_SIZE, sha256_of_files
from nfn.tokenizers.gpt2_files import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256, gpt2_files

ENDOFTEXT = "<|endoftext|>"

_encoding = None  # built once per process: parsing the merges takes ~0.5 s


def gpt2_encoding():
    global _encoding
    if _encoding is None:
        vocab_bpe, encoder_json = gpt2_files()
        try:
            ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe, encoder_json, VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)
        except ValueError as e:  # tiktoken's hash check
            raise UserError(f"{os.path.dirname(vocab_bpe)}: GPT-2 BPE files do not match their published hashes ({e})") from None
        _encoding = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                      special_tokens={ENDOFTEXT: GPT2_VOCAB_SIZE - 1},
                                      explicit_n_vocab=GPT2_VOCAB_SIZE)
    return _encoding


class GPT2Tokenizer:
    name = "gpt2"
    vocab_size = GPT2_VOCAB_SIZE
    eot_id = GPT2_VOCAB_SIZE - 1  # <|endoftext|>, prepended to every document as in llm.c

    def __init__(self):
        self._enc = gpt2_encoding()

    def encode(self, text):
        """Ordinary text: a literal "<|endoftext|>" in the text is encoded as text, not as eot."""
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts):
        return self._enc.encode_ordinary_batch(list(texts))

    def decode(self, ids):
        return self._enc.decode(list(ids))

    def identity(self):
        return {"name": self.name, "kind": "tiktoken-bpe", "vocab_size": self.vocab_size,
                "sha256": sha256_of_files(gpt2_files())}
