"""A model's own tokenizer as the `tokenizers` library saves it (tokenizer.json), beside the
model that `nfn import` wrote (docs/weights.md).

On disk, in the imported model's directory under the artifacts directory:
  nfn_tokenizer.json  {"kind": "hf-tokenizer", "format": 1, "name", "vocab_size",
                       "eot_token" (where generation stops: the model's end-of-turn token),
                       "bos_token", "special_tokens": {text: id}, "chat_template" (Jinja text
                       or null), "chat_special_tokens": {text: id} (the special tokens the
                       template writes), "files": {"tokenizer": "tokenizer.json"}, "source"}
  tokenizer.json      the `tokenizers` library's file: model, pre-tokenizer, decoder, added tokens

Only the standard library is imported here until a tokenizer is loaded.
"""
import json
import os

from nfn.errors import UserError

KIND = "hf-tokenizer"
FORMAT_VERSION = 1
MANIFEST = "nfn_tokenizer.json"
TOKENIZER_FILE = "tokenizer.json"


def manifest_text(name, vocab_size, eot_token, bos_token, special_tokens, chat_template, source):
    """The nfn_tokenizer.json that describes a tokenizer.json written beside it."""
    chat_special = {t: i for t, i in special_tokens.items() if chat_template and t in chat_template}
    manifest = {
        "kind": KIND,
        "format": FORMAT_VERSION,
        "name": name,
        "vocab_size": vocab_size,
        "eot_token": eot_token,
        "bos_token": bos_token,
        "special_tokens": special_tokens,
        "chat_template": chat_template,
        "chat_special_tokens": chat_special,
        "files": {"tokenizer": TOKENIZER_FILE},
        "source": source,
    }
    return json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"


def read_manifest(directory):
    """The manifest of directory's tokenizer when it is of this kind, else None (no file, not
    JSON, another kind): a cheap test, for finding names."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("kind") == KIND else None


def load(directory):
    """The tokenizer in directory, its files checked against each other."""
    manifest_path = os.path.join(directory, MANIFEST)
    try:
        with open(manifest_path, "rb") as f:
            manifest_bytes = f.read()
        manifest = json.loads(manifest_bytes.decode("utf-8"))
    except OSError as e:
        raise UserError(f"{manifest_path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise UserError(f"{manifest_path}: not readable JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise UserError(f"{manifest_path}: field 'kind' must be {KIND!r}")
    if manifest.get("format") != FORMAT_VERSION:
        raise UserError(f"{manifest_path}: field 'format' is {manifest.get('format')!r}, this nfn reads "
                        f"{FORMAT_VERSION}")

    def field(key, kind):
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{manifest_path}: field {key!r} is missing or not {kind.__name__}")
        return value

    name, vocab_size = field("name", str), field("vocab_size", int)
    special = field("special_tokens", dict)
    file_name = field("files", dict).get("tokenizer")
    if not isinstance(file_name, str) or os.path.basename(file_name) != file_name or file_name in ("", ".", ".."):
        raise UserError(f"{manifest_path}: field 'files.tokenizer' must be a file name")
    path = os.path.join(directory, file_name)
    try:
        with open(path, "rb") as f:
            tokenizer_bytes = f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(f"{path}: reading it needs the tokenizers package (pip install tokenizers, or the "
                        "nfn wheel's [import] extra)") from None
    try:
        tokenizer = Tokenizer.from_str(tokenizer_bytes.decode("utf-8"))
    except Exception as e:  # the library raises its own exception types
        raise UserError(f"{path}: not a tokenizers file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    if tokenizer.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise UserError(f"{manifest_path}: field 'vocab_size' is {vocab_size} but {file_name} holds "
                        f"{tokenizer.get_vocab_size(with_added_tokens=True)} tokens")
    for text, token_id in special.items():
        if tokenizer.token_to_id(text) != token_id:
            raise UserError(f"{manifest_path}: special token {text!r} is id {token_id!r} here but "
                            f"{tokenizer.token_to_id(text)!r} in {file_name}")
    for key in ("eot_token", "bos_token"):
        value = manifest.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or
                                  not 0 <= value < vocab_size):
            raise UserError(f"{manifest_path}: field {key!r} is not a token id of [0, {vocab_size})")
    from nfn.tokenizers import sha256_of_contents
    sha256 = sha256_of_contents(sorted([(manifest_path, manifest_bytes), (path, tokenizer_bytes)]))
    return HFTokenizer(name, tokenizer, manifest, sha256)


class HFTokenizer:
    """Encode and decode with the `tokenizers` library. As with nfn's other tokenizers, plain
    text never turns into special tokens: "<|im_end|>" typed in a message is text; special ids
    come from special_id() (or prepend/append)."""

    kind = KIND

    def __init__(self, name, tokenizer, manifest, sha256):
        self.name = name
        self._tok = tokenizer
        # Special tokens' text is matched as ordinary text (a property the file does not keep).
        self._tok.encode_special_tokens = True
        self._special = dict(manifest["special_tokens"])
        self._special_by_id = {i: t for t, i in self._special.items()}
        self._sha256 = sha256
        self.vocab_size = int(manifest["vocab_size"])
        self.eot_id = manifest.get("eot_token")  # where generation stops (SmolLM2: <|im_end|>)
        self.bos_id = manifest.get("bos_token")
        self.chat_template = manifest.get("chat_template")
        self.chat_special_ids = dict(manifest.get("chat_special_tokens") or {})

    @property
    def special_tokens(self):
        return dict(self._special)

    def special_id(self, token):
        """The id of a special token, by its text (KeyError names the unknown token)."""
        try:
            return self._special[token]
        except KeyError:
            raise KeyError(f"unknown special token {token!r}; known: {list(self._special)}") from None

    def is_special(self, token_id):
        return token_id in self._special_by_id

    def _resolve(self, token):
        if token is None:
            return None
        if isinstance(token, str):
            return self.special_id(token)
        if isinstance(token, int) and not isinstance(token, bool) and 0 <= token < self.vocab_size:
            return token
        raise ValueError(f"prepend/append must be a special token's text or an id in [0, {self.vocab_size}), "
                         f"got {token!r}")

    def encode(self, text, prepend=None, append=None):
        """Token ids of text; prepend/append: a special token's text or a raw id."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        first, last = self._resolve(prepend), self._resolve(append)
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([first] if first is not None else []) + ids + ([last] if last is not None else [])

    def encode_batch(self, texts, prepend=None, append=None):
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"encode_batch: item {i} is {type(t).__name__}, not str")
        first, last = self._resolve(prepend), self._resolve(append)
        out = [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        return [([first] if first is not None else []) + ids + ([last] if last is not None else [])
                for ids in out]

    def decode(self, ids):
        """Text of ids, special tokens written out; bytes that are not UTF-8 become U+FFFD."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def identity(self):
        """Name, kind, vocabulary size and the sha256 of its two files as they were loaded."""
        return {"name": self.name, "kind": self.kind, "vocab_size": self.vocab_size, "sha256": self._sha256}
