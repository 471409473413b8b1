"""Write llm.c token shards: {prefix}_{split}_{index:06d}.bin, a new file every shard_tokens ids."""
import os
import re

import numpy as np

from nfn.data.shard_headers import header_bytes

DEFAULT_SHARD_TOKENS = 100_000_000  # llm.c's FineWeb shard size
PREFIX_MAX_CHARS = 64


def shard_prefix(dataset):
    """The file-name form of a dataset name (an alias, or the path of pretraining text): its
    last path component without an extension, letters, digits and '-' kept and any other run
    of characters one '-'. With no '_' in it, `{prefix}_train_` and `{prefix}_val_` can never
    be mistaken for each other by readers that look for `_train_` and `_val_`."""
    stem = os.path.splitext(os.path.basename(dataset.rstrip("/")))[0]
    return re.sub(r"[^A-Za-z0-9-]+", "-", stem).strip("-")[:PREFIX_MAX_CHARS].strip("-") or "data"


class ShardWriter:
    def __init__(self, directory, prefix, split, token_bytes, shard_tokens=DEFAULT_SHARD_TOKENS):
        self.directory, self.prefix, self.split = directory, prefix, split
        self.token_bytes = token_bytes
        self.dtype = np.dtype("<u2" if token_bytes == 2 else "<u4")
        self.shard_tokens = shard_tokens
        self.pending, self.pending_count = [], 0
        self.written = []  # [{"file", "tokens"}]

    def add(self, ids):
        self.pending.append(np.asarray(ids, dtype=self.dtype))
        self.pending_count += len(ids)
        while self.pending_count >= self.shard_tokens:
            self._flush(self.shard_tokens)

    def _flush(self, n):
        tokens = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        head, rest = tokens[:n], tokens[n:]
        name = f"{self.prefix}_{self.split}_{len(self.written):06d}.bin"
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(header_bytes(len(head), self.token_bytes))
            f.write(head.tobytes())
        self.written.append({"file": name, "tokens": int(len(head))})
        self.pending = [rest] if len(rest) else []
        self.pending_count = len(rest)

    def close(self):
        if self.pending_count:
            self._flush(self.pending_count)
        return self.written
