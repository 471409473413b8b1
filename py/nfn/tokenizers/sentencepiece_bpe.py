"""SentencePiece BPE tokenizers sp1024..sp8192, kept under the tokenizer cache.

A missing model is downloaded from $NFN_SP_TOKENIZER_URL/<name>.model when that is set,
otherwise trained deterministically on the embedded default corpus. The models are
lossless: identity normalization, whitespace kept, byte fallback for unseen characters.
"""
import io
import os
import sys

import sentencepiece as spm

from nfn import fileio, paths
from nfn.errors import UserError
from nfn.tokenizers import sha256_of_contents

SOURCE_URL_ENV = "NFN_SP_TOKENIZER_URL"
BOS_ID = 1  # <s>: prepended to every document in shards (the eot/BOS separator)


def model_path(name):
    return os.path.join(paths.tokenizers_dir(), name, f"{name}.model")


def _write_atomically(path, data):
    """The model file, whole or not at all; what a killed writer left there is removed first
    (fileio.atomic_open)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with fileio.atomic_open(path, "wb") as f:
        f.write(data)


def train_model(lines, vocab_size):
    """Serialized model bytes; the same lines always give the same bytes (one thread, no sampling)."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, model_type="bpe", vocab_size=vocab_size,
        character_coverage=0.9995, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=False,
        allow_whitespace_only_pieces=True, unk_id=0, bos_id=BOS_ID, eos_id=2, pad_id=-1,
        input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
        max_sentence_length=1 << 16, minloglevel=2)
    return out.getvalue()


def _default_corpus_lines(quiet):
    from nfn.data import DEFAULT_DATASET
    from nfn.data.sources import read_text
    return [line for line in read_text(DEFAULT_DATASET, quiet).split("\n") if line.strip()]


def _download(name, base_url):
    from nfn.data.download import fetch_bytes
    return fetch_bytes(f"{base_url.rstrip('/')}/{name}.model", what=f"tokenizer {name}")


class SentencePieceTokenizer:
    def __init__(self, name, path):
        self.name = name
        self.path = path
        self._sp = spm.SentencePieceProcessor()
        try:
            with open(path, "rb") as f:
                model = f.read()  # loaded and hashed from one read (BPETokenizer's reason)
            self._sp.LoadFromSerializedProto(model)
        except (OSError, RuntimeError) as e:
            raise UserError(f"{path}: not a readable SentencePiece model ({e})") from None
        self.vocab_size = self._sp.GetPieceSize()
        self.eot_id = self._sp.bos_id()
        self._sha256 = sha256_of_contents([(path, model)])

    @classmethod
    def materialize(cls, name, vocab_size, quiet=False):
        """Load the cached model, making it first when it is missing."""
        path = model_path(name)
        if not os.path.isfile(path):
            base_url = os.environ.get(SOURCE_URL_ENV, "").strip()
            if base_url:
                data = _download(name, base_url)
            else:
                if not quiet:  # a one-time notice, kept in logs too
                    print(f"nfn: training tokenizer {name} on the default corpus (once)", file=sys.stderr)
                data = train_model(_default_corpus_lines(quiet), vocab_size)
            try:
                _write_atomically(path, data)
            except OSError as e:
                raise UserError(f"{os.path.dirname(path)}: cannot write tokenizer {name} ({e.strerror}); "
                                f"set {paths.TOKENIZERS_ENV} to a writable directory") from None
        tok = cls(name, path)
        if tok.vocab_size != vocab_size:
            raise UserError(f"{path}: model has {tok.vocab_size} pieces, {name} needs {vocab_size}")
        return tok

    def encode(self, text):
        return self._sp.EncodeAsIds(text)

    def encode_batch(self, texts):
        return self._sp.Encode(list(texts), out_type=int, num_threads=os.cpu_count() or 1)

    def decode(self, ids):
        return self._sp.DecodeIds(list(ids))

    def identity(self):
        return {"name": self.name, "kind": "sentencepiece-bpe", "vocab_size": self.vocab_size,
                "sha256": self._sha256}
