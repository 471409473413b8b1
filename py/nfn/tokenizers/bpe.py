"""The chat tokenizer: a byte-level BPE trained with rustbpe, encoded with tiktoken.

On disk (one directory per name under the tokenizer cache):
  nfn_tokenizer.json  {"kind": "bpe", "format": 1, "name", "vocab_size", "pattern",
                       "special_tokens": {name: id}, "files": {"ranks": "bpe.tiktoken"}}
  bpe.tiktoken        one merge per line: base64(token bytes) SPACE rank (tiktoken's format)
  heldout.txt         optional: text kept out of training, for `nfn tokenizer eval`
"""
import base64
import json
import os

from nfn import fileio
from nfn.errors import UserError

FORMAT_VERSION = 1
MANIFEST = "nfn_tokenizer.json"
RANKS_FILE = "bpe.tiktoken"
HELDOUT_FILE = "heldout.txt"

SPECIAL_TOKENS = [
    "<|bos|>",  # starts every document and conversation
    "<|user_start|>", "<|user_end|>",
    "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>",  # the assistant calls the python tool
    "<|output_start|>", "<|output_end|>",  # the tool's output, written back by the engine
]

# GPT-4's pre-split regex, with numbers split into groups of at most two digits (as nanochat
# does: small vocabularies waste fewer merges on three-digit numbers).
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s+"""
)

MIN_VOCAB = 256 + len(SPECIAL_TOKENS)


MAX_VOCAB = 2**32 - 1


def train(texts, vocab_size, name, out_root, heldout=None, quiet=False):
    """Train on an iterable of strings; save atomically to out_root/name; return the directory.

    vocab_size counts everything: 256 byte tokens, the merges, and the special tokens.
    heldout: text kept out of training, saved beside the model for `nfn tokenizer eval`.
    """
    import rustbpe

    check_name(name)
    if vocab_size < MIN_VOCAB:
        raise UserError(f"--vocab-size must be at least {MIN_VOCAB} (256 bytes + "
                        f"{len(SPECIAL_TOKENS)} special tokens), got {vocab_size}")
    if vocab_size > MAX_VOCAB:
        raise UserError(f"--vocab-size must be at most {MAX_VOCAB} (token ids are stored as uint32), "
                        f"got {vocab_size}")
    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(iter(texts), vocab_size - len(SPECIAL_TOKENS), pattern=SPLIT_PATTERN)
    ranks = sorted(((bytes(b), r) for b, r in trainer.get_mergeable_ranks()), key=lambda x: x[1])
    # tiktoken needs ranks 0..n-1 with no gaps; a short corpus may yield fewer merges.
    if [r for _, r in ranks] != list(range(len(ranks))) or len(ranks) < 256:
        raise UserError(f"BPE training produced an invalid rank table ({len(ranks)} entries)")
    special = {tok: len(ranks) + i for i, tok in enumerate(SPECIAL_TOKENS)}
    manifest = {
        "kind": "bpe",
        "format": FORMAT_VERSION,
        "name": name,
        "vocab_size": len(ranks) + len(SPECIAL_TOKENS),
        "requested_vocab_size": vocab_size,
        "pattern": SPLIT_PATTERN,
        "special_tokens": special,
        "files": {"ranks": RANKS_FILE},
    }
    ranks_text = "".join(f"{base64.b64encode(b).decode()} {r}\n" for b, r in ranks)
    files = {RANKS_FILE: ranks_text, MANIFEST: json.dumps(manifest, indent=1) + "\n"}
    if heldout is not None:
        files[HELDOUT_FILE] = heldout
    return save_atomically(out_root, name, files, quiet)


def check_name(name):
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise UserError(f"--name must be a plain directory name, got {name!r}")
    from nfn.tokenizers import BUILTIN, imported_dir
    if name in BUILTIN:
        raise UserError(f"--name {name} is a built-in tokenizer's; choose another name")
    if imported_dir(name):  # a trained one of the same name would shadow it
        raise UserError(f"--name {name} is the tokenizer of the model imported in {imported_dir(name)}; "
                        "choose another name")


def save_atomically(out_root, name, files, quiet=False):
    """Write files into a temp directory beside the target, then rename it into place,
    replacing an older one in one step (removing a killed writer's leftovers first, saying so
    unless quiet)."""
    os.makedirs(out_root, exist_ok=True)
    final = os.path.join(out_root, name)
    fileio.remove_orphaned_dirs(out_root, quiet)
    with fileio.WorkDir(out_root, "tmp", name) as tmp:
        for fname, text in files.items():
            with open(os.path.join(tmp.path, fname), "w", encoding="utf-8", newline="") as f:
                f.write(text)
        fileio.install_dir(tmp.path, final)  # in one step: a reader finds the old or the new one
    return final


class _Replaced(Exception):
    """The directory was replaced (a retrain) while its files were being read."""


def load_trained(directory):
    """Read and validate a tokenizer directory written by `train`. Its files are read from one
    directory, and read again where a retrain replaced it meanwhile (save_atomically), so that
    a tokenizer is never one training's manifest with another's ranks."""
    for _ in range(10):
        try:  # O_PATH: a directory that may be entered but not listed still opens
            dir_fd = os.open(directory, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            dir_fd = None  # named in the manifest's error below
        except OSError as e:
            raise UserError(f"{directory}: cannot open ({e.strerror})") from None
        try:
            return _load_trained(directory, dir_fd)
        except _Replaced:
            continue
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
    raise UserError(f"{directory}: replaced again and again while being read; try again")


def _load_trained(directory, dir_fd):
    def read(path):
        """The file's bytes, from the directory dir_fd holds; _Replaced where it is gone from
        there because that directory is no longer the one at `directory`."""
        try:
            if dir_fd is None:
                raise FileNotFoundError
            fd = os.open(os.path.basename(path), os.O_RDONLY, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                replaced = dir_fd is not None and not os.path.samestat(os.fstat(dir_fd), os.stat(directory))
            except OSError:
                replaced = False
            if replaced:
                raise _Replaced from None
            raise
        with os.fdopen(fd, "rb") as f:
            return f.read()

    manifest_path = os.path.join(directory, MANIFEST)
    try:
        manifest_bytes = read(manifest_path)  # parsed and hashed as read: the identity is of what was loaded
        manifest = json.loads(manifest_bytes.decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{manifest_path}: not found (train it with `nfn tokenizer train`)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{manifest_path}: not readable JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{manifest_path}: expected a JSON object")

    def field(key, kind):
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{manifest_path}: field {key!r} is missing or not {kind.__name__}")
        return value

    if field("kind", str) != "bpe":
        raise UserError(f"{manifest_path}: field 'kind' is {manifest['kind']!r}, expected 'bpe'")
    if field("format", int) != FORMAT_VERSION:
        raise UserError(f"{manifest_path}: field 'format' is {manifest['format']}, "
                        f"this nfn reads {FORMAT_VERSION}")
    name, vocab_size, pattern = field("name", str), field("vocab_size", int), field("pattern", str)
    special = field("special_tokens", dict)
    for token, token_id in special.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            raise UserError(f"{manifest_path}: field 'special_tokens': {token!r} has id {token_id!r}, "
                            f"not an integer")
    ranks_name = field("files", dict).get("ranks")
    if (not isinstance(ranks_name, str) or os.path.basename(ranks_name) != ranks_name
            or ranks_name in ("", ".", "..")):
        raise UserError(f"{manifest_path}: field 'files.ranks' must be a file name")
    ranks_path = os.path.join(directory, ranks_name)
    try:
        ranks_bytes = read(ranks_path)
    except FileNotFoundError:
        raise UserError(f"{ranks_path}: not found") from None
    except OSError as e:
        raise UserError(f"{ranks_path}: cannot read ({e.strerror})") from None
    ranks = read_ranks(ranks_path, ranks_bytes)
    if sorted(special.values()) != list(range(len(ranks), len(ranks) + len(special))):
        raise UserError(f"{manifest_path}: field 'special_tokens' must number the ids "
                        f"{len(ranks)}..{len(ranks) + len(special) - 1}")
    if set(SPECIAL_TOKENS) - set(special):
        raise UserError(f"{manifest_path}: field 'special_tokens' lacks "
                        f"{sorted(set(SPECIAL_TOKENS) - set(special))}")
    if vocab_size != len(ranks) + len(special):
        raise UserError(f"{manifest_path}: field 'vocab_size' is {vocab_size} but the files "
                        f"hold {len(ranks) + len(special)} tokens")
    from nfn.tokenizers import sha256_of_contents
    sha256 = sha256_of_contents(sorted([(manifest_path, manifest_bytes), (ranks_path, ranks_bytes)]))
    try:  # tiktoken compiles the pattern here; a bad one is its ValueError
        return BPETokenizer(name, pattern, ranks, special, sha256=sha256)
    except ValueError as e:
        raise UserError(f"{manifest_path}: field 'pattern' does not compile ({e})") from None


def read_ranks(path, data):
    """The ranks in `data`, the bytes of the ranks file at `path` (named in errors)."""
    ranks = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        parts = line.split()
        try:
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
            if len(parts) != 2:
                raise ValueError
        except (ValueError, IndexError):
            raise UserError(f"{path}: line {lineno}: expected 'BASE64 RANK'") from None
        if rank != len(ranks) or token in ranks:
            raise UserError(f"{path}: line {lineno}: rank {rank} out of order or duplicated")
        ranks[token] = rank
    if any(bytes([b]) not in ranks for b in range(256)):
        raise UserError(f"{path}: lacks some of the 256 single-byte tokens")
    return ranks


class BPETokenizer:
    """Encode and decode with tiktoken; special tokens are never parsed out of plain text."""

    kind = "bpe"

    def __init__(self, name, pattern, mergeable_ranks, special_tokens, sha256):
        import tiktoken

        self.name = name
        self._enc = tiktoken.Encoding(name=f"nfn-{name}", pat_str=pattern,
                                      mergeable_ranks=mergeable_ranks, special_tokens=special_tokens)
        self._special = dict(special_tokens)
        self._special_by_id = {i: t for t, i in special_tokens.items()}
        self._byte_ids = [mergeable_ranks[bytes([b])] for b in range(256)]
        # sha256: of the files' bytes as load_trained read them, so that a retrain of the same
        # name while this one encodes never lends its hash to what this one made (a dataset
        # cache entry would trust it).
        self._sha256 = sha256
        self.vocab_size = self._enc.n_vocab
        self.bos_id = self._special["<|bos|>"]
        self.eot_id = self.bos_id  # documents are separated by BOS, so BOS is also the end marker

    # -- special tokens ------------------------------------------------------------------
    @property
    def special_tokens(self):
        return dict(self._special)

    def special_id(self, token):
        """The id of a special token, by name (KeyError names the unknown token)."""
        try:
            return self._special[token]
        except KeyError:
            raise KeyError(f"unknown special token {token!r}; known: {list(self._special)}") from None

    def _resolve(self, token):
        if token is None:
            return None
        if isinstance(token, str):
            return self.special_id(token)
        if isinstance(token, int) and not isinstance(token, bool) and 0 <= token < self.vocab_size:
            return token
        raise ValueError(f"prepend/append must be a special token name or an id in "
                         f"[0, {self.vocab_size}), got {token!r}")

    # -- encoding -----------------------------------------------------------------------
    def encode(self, text, prepend=None, append=None):
        """Token ids of text; prepend/append: a special token's name or a raw id."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        first, last = self._resolve(prepend), self._resolve(append)
        ids = self._enc.encode_ordinary(text)
        if first is not None:
            ids.insert(0, first)
        if last is not None:
            ids.append(last)
        return ids

    def encode_batch(self, texts, prepend=None, append=None, num_threads=8):
        """One independent list per text, in input order."""
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"encode_batch: item {i} is {type(t).__name__}, not str")
        first, last = self._resolve(prepend), self._resolve(append)
        out = self._enc.encode_ordinary_batch(texts, num_threads=num_threads)
        out = [list(ids) for ids in out]  # never share a list between rows
        for ids in out:
            if first is not None:
                ids.insert(0, first)
            if last is not None:
                ids.append(last)
        return out

    def encode_bytes(self, data):
        """Ids for arbitrary bytes: valid UTF-8 runs through BPE, other bytes as byte tokens."""
        ids, view = [], bytes(data)
        while view:
            try:
                ids.extend(self._enc.encode_ordinary(view.decode("utf-8")))
                break
            except UnicodeDecodeError as e:
                if e.start:
                    ids.extend(self._enc.encode_ordinary(view[:e.start].decode("utf-8")))
                ids.extend(self._byte_ids[b] for b in view[e.start:e.end])
                view = view[e.end:]
        return ids

    # -- decoding -----------------------------------------------------------------------
    def token_bytes(self, token_id):
        """The exact bytes of one token (a special token's name, UTF-8 encoded)."""
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id!r} out of range [0, {self.vocab_size})")
        return self._enc.decode_single_token_bytes(token_id)

    def decode_bytes(self, ids):
        return self._enc.decode_bytes(list(ids))

    def decode(self, ids):
        """Text of ids; bytes that are not valid UTF-8 become U+FFFD."""
        return self._enc.decode(list(ids), errors="replace")

    def is_special(self, token_id):
        return token_id in self._special_by_id

    def identity(self):
        """Name, kind, vocabulary size and the sha256 of its files as they were loaded:
        tokenizers.fingerprint's while they are unchanged, so a dataset cache entry made with
        it is found again, and not after a retrain."""
        return {"name": self.name, "kind": self.kind, "vocab_size": self.vocab_size, "sha256": self._sha256}
