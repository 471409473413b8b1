"""llm.c token shard headers, read with the standard library only (the fast, cached path).

A shard is 256 little-endian int32 (magic, version, token count, zeros) then the tokens:
uint16 for magic 20240520 version 1, uint32 for magic 20240801 version 7.
"""
import os
import stat
import struct

from nfn.errors import UserError

HEADER_BYTES = 1024
MAGIC_U16, VERSION_U16 = 20240520, 1
MAGIC_U32, VERSION_U32 = 20240801, 7
MASKED_ROW_MAGIC = 20261215  # nfn.data.masked_rows: told apart, never read as tokens


def token_bytes_for_vocab(vocab_size):
    """uint16 ids while every id fits, else the uint32 variant."""
    return 2 if vocab_size <= 1 << 16 else 4


def header_bytes(num_tokens, token_bytes):
    """The 1024-byte header of a shard holding num_tokens ids of token_bytes each."""
    magic, version = (MAGIC_U16, VERSION_U16) if token_bytes == 2 else (MAGIC_U32, VERSION_U32)
    return struct.pack("<3i", magic, version, num_tokens) + bytes(HEADER_BYTES - 12)


def read_header(path):
    """(num_tokens, token_bytes) after checking magic, version and the exact file size."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open
            raise UserError(f"{path}: not a regular file")
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as e:
        raise UserError(f"{path}: cannot read shard ({e.strerror})") from None
    if size < HEADER_BYTES:
        raise UserError(f"{path}: truncated header: {size} bytes, a shard needs at least {HEADER_BYTES}")
    magic, version, ntok = struct.unpack("<3i", head)
    if magic == MAGIC_U16:
        token_bytes, want_version = 2, VERSION_U16
    elif magic == MAGIC_U32:
        token_bytes, want_version = 4, VERSION_U32
    elif magic == MASKED_ROW_MAGIC:
        raise UserError(f"{path}: a masked-row shard (nfn sft's rows of tokens and loss masks), not a token shard; "
                        "`nfn sft` trains on it")
    else:
        raise UserError(f"{path}: bad magic {magic} (expected {MAGIC_U16} for uint16 or {MAGIC_U32} for uint32 tokens)")
    if version != want_version:
        raise UserError(f"{path}: unsupported version {version} for magic {magic} (expected {want_version})")
    if ntok < 0:
        raise UserError(f"{path}: negative token count {ntok} in header")
    expected = HEADER_BYTES + token_bytes * ntok
    if size != expected:
        what = "truncated" if size < expected else "too long"
        raise UserError(f"{path}: {what}: file is {size} bytes, header says {ntok} tokens = {expected} bytes")
    return ntok, token_bytes


def shards_in(directory, split):
    """Sorted *_<split>_*.bin / *_<split>.bin files of a directory (not validated)."""
    names = sorted(n for n in os.listdir(directory)
                   if n.endswith(".bin") and (f"_{split}_" in n or n.endswith(f"_{split}.bin")))
    return [os.path.join(directory, n) for n in names]


def validation_siblings(train_path):
    """The *_val*.bin files beside a *_train*.bin file (same name prefix), sorted."""
    directory, name = os.path.split(os.path.abspath(train_path))
    at = name.rfind("_train")
    if at < 0 or not name.endswith(".bin"):
        raise UserError(f"{train_path}: not a *_train*.bin shard name, so its validation shards cannot be inferred")
    prefix = name[:at] + "_val"
    found = sorted(n for n in os.listdir(directory)
                   if n.startswith(prefix) and n.endswith(".bin") and n[len(prefix)] in "_.")
    if not found:
        raise UserError(f"{train_path}: no validation shard beside it (looked for {prefix}*.bin in {directory})")
    return [os.path.join(directory, n) for n in found]
