"""Masked-row shards: supervised fine-tuning's rows, written for the trainer (cc/data/masked_rows.h).

A file is 256 little-endian int32 (1024 bytes), then `rows` records, each R tokens (uint16, or
uint32 where the vocabulary passes 65,536 ids) followed by R mask bytes (0 or 1):

    [0] 20261215 (magic)  [1] 1 (version)  [2] R, tokens a row  [3] token width in bytes (2 or 4)
    [4] the BOS id every row starts with  [6] rows, an int64 (words 6 and 7)  the rest 0

so its size is exactly 1024 + rows * R * (width + 1). The trainer trains on row[:-1] -> row[1:],
a target counting only where its own mask byte is 1. Standard library only.
"""
import array
import os
import struct
import sys

from nfn.errors import UserError

MAGIC, VERSION = 20261215, 1
HEADER_BYTES = 1024
_TYPECODES = {2: "H", 4: "I"}


def token_bytes_for_vocab(vocab_size):
    """uint16 ids while every id fits, else uint32."""
    return 2 if vocab_size <= 1 << 16 else 4


def header_bytes(rows, row_tokens, token_bytes, bos):
    words = [MAGIC, VERSION, row_tokens, token_bytes, bos, 0]
    return struct.pack("<6i", *words) + struct.pack("<q", rows) + bytes(HEADER_BYTES - 32)


def file_bytes(rows, row_tokens, token_bytes):
    """The exact size of a file of `rows` rows."""
    return HEADER_BYTES + rows * row_tokens * (token_bytes + 1)


class MaskedRowWriter:
    """Rows appended one at a time to `path`; close() writes the header's row count. The file is
    whole only after close(): write it where a rename publishes it (nfn.fileio.WorkDir)."""

    def __init__(self, path, row_tokens, token_bytes, bos):
        if token_bytes not in _TYPECODES:
            raise ValueError(f"token width {token_bytes} (2 or 4)")
        self.path, self.row_tokens, self.token_bytes, self.bos = path, row_tokens, token_bytes, bos
        self.rows = 0
        self._limit = 1 << (8 * token_bytes)
        self._file = open(path, "wb")
        self._file.write(header_bytes(0, row_tokens, token_bytes, bos))

    def write(self, ids, mask):
        if len(ids) != self.row_tokens or len(mask) != self.row_tokens:
            raise ValueError(f"row {self.rows}: {len(ids)} ids and {len(mask)} mask values, a row is "
                             f"{self.row_tokens}")
        if ids[0] != self.bos:
            raise ValueError(f"row {self.rows}: starts with {ids[0]}, not BOS {self.bos}")
        tokens = array.array(_TYPECODES[self.token_bytes], ids)  # OverflowError past the width
        if tokens.itemsize != self.token_bytes:  # "I" is 4 bytes on every platform nfn builds for
            raise ValueError(f"array typecode {tokens.typecode} is {tokens.itemsize} bytes here")
        if sys.byteorder != "little":
            tokens.byteswap()
        flags = bytes(mask)  # ValueError past a byte
        if flags.strip(b"\x00\x01"):
            raise ValueError(f"row {self.rows}: mask values must be 0 or 1")
        self._file.write(tokens.tobytes())
        self._file.write(flags)
        self.rows += 1

    def close(self):
        if self._file is None:
            return
        self._file.flush()
        self._file.seek(0)
        self._file.write(header_bytes(self.rows, self.row_tokens, self.token_bytes, self.bos))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._file is not None:
            self._file.close()
            self._file = None
            if exc[0] is None:
                raise RuntimeError("MaskedRowWriter left without close()")


def read_header(path):
    """{rows, row_tokens, token_bytes, bos} after checking the magic, version and exact size;
    UserError naming the file and the field."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(32)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    if size < HEADER_BYTES:
        raise UserError(f"{path}: truncated header: {size} bytes, a masked-row shard needs at least {HEADER_BYTES}")
    magic, version, row_tokens, token_bytes, bos, _ = struct.unpack("<6i", head[:24])
    (rows,) = struct.unpack("<q", head[24:32])
    if magic != MAGIC:
        raise UserError(f"{path}: bad magic {magic} (a masked-row shard has {MAGIC})")
    if version != VERSION:
        raise UserError(f"{path}: unsupported version {version} (masked-row shards are version {VERSION})")
    if token_bytes not in _TYPECODES or row_tokens < 2 or rows < 0:
        raise UserError(f"{path}: header holds token width {token_bytes}, row length {row_tokens}, rows {rows}")
    if size != file_bytes(rows, row_tokens, token_bytes):
        raise UserError(f"{path}: file is {size} bytes, its header says {rows} rows of {row_tokens} tokens = "
                        f"{file_bytes(rows, row_tokens, token_bytes)}")
    return {"rows": rows, "row_tokens": row_tokens, "token_bytes": token_bytes, "bos": bos}
