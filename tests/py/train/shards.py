"""Token shards for the trainer tests, written with the package's own header writer."""
import numpy as np

from nfn.data.shard_headers import header_bytes


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(header_bytes(len(tokens), 2))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())
