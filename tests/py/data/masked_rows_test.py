"""nfn.data.masked_rows writes the byte layout docs/data.md gives, read back here by a reader
written from that description alone; its refusals are one line."""
import os
import shutil
import struct
import tempfile
import unittest

from nfn.data import masked_rows, shard_headers
from nfn.errors import UserError


def read_independently(path):
    """(header words, rows as (ids, mask)) by the documented layout: 256 little-endian int32,
    rows as an int64 at words 6-7, then per row R ids of `width` bytes and R mask bytes."""
    with open(path, "rb") as f:
        raw = f.read()
    words = struct.unpack("<256i", raw[:1024])
    (rows,) = struct.unpack("<q", raw[24:32])
    row_tokens, width = words[2], words[3]
    fmt = {2: "H", 4: "I"}[width]
    out, at = [], 1024
    for _ in range(rows):
        ids = list(struct.unpack(f"<{row_tokens}{fmt}", raw[at: at + row_tokens * width]))
        at += row_tokens * width
        mask = list(raw[at: at + row_tokens])
        at += row_tokens
        out.append((ids, mask))
    assert at == len(raw), (at, len(raw))
    return words, rows, out


class MaskedRowsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def write(self, name, rows, row_tokens, width, bos):
        path = os.path.join(self.tmp, name)
        with masked_rows.MaskedRowWriter(path, row_tokens, width, bos) as w:
            for ids, mask in rows:
                w.write(ids, mask)
            w.close()
        return path

    def test_uint16_rows_round_trip_the_documented_layout(self):
        rows = [([7, 1, 2, 3, 65535], [0, 0, 1, 1, 1]), ([7, 7, 7, 7, 7], [0, 0, 0, 0, 0]),
                ([7, 300, 7, 4, 5], [0, 1, 0, 0, 1])]
        path = self.write("a_train_000000.bin", rows, 5, 2, 7)
        words, count, got = read_independently(path)
        self.assertEqual(words[:6], (20261215, 1, 5, 2, 7, 0))
        self.assertEqual(words[8:], (0,) * 248)
        self.assertEqual((count, got), (3, rows))
        self.assertEqual(os.path.getsize(path), 1024 + 3 * 5 * 3)
        self.assertEqual(masked_rows.read_header(path), {"rows": 3, "row_tokens": 5, "token_bytes": 2, "bos": 7})

    def test_uint32_rows_for_large_vocabularies(self):
        self.assertEqual(masked_rows.token_bytes_for_vocab(65536), 2)
        self.assertEqual(masked_rows.token_bytes_for_vocab(65537), 4)
        rows = [([100000, 70000, 1, 2**32 - 1], [0, 1, 1, 0])]
        path = self.write("b.bin", rows, 4, 4, 100000)
        words, count, got = read_independently(path)
        self.assertEqual(words[:5], (20261215, 1, 4, 4, 100000))
        self.assertEqual(got, rows)
        self.assertEqual(os.path.getsize(path), 1024 + 4 * 5)

    def test_an_empty_file_is_a_header(self):
        path = self.write("c.bin", [], 9, 2, 0)
        self.assertEqual(read_independently(path)[1:], (0, []))

    def test_bad_rows_are_refused(self):
        path = os.path.join(self.tmp, "d.bin")
        with masked_rows.MaskedRowWriter(path, 3, 2, 1) as w:
            with self.assertRaisesRegex(ValueError, "row 0: 2 ids and 3 mask values, a row is 3"):
                w.write([1, 2], [0, 1, 1])
            with self.assertRaisesRegex(ValueError, "row 0: starts with 2, not BOS 1"):
                w.write([2, 2, 2], [0, 1, 1])
            with self.assertRaisesRegex(ValueError, "mask values must be 0 or 1"):
                w.write([1, 2, 2], [0, 2, 1])
            with self.assertRaises(OverflowError):
                w.write([1, 2, 65536], [0, 1, 1])
            w.write([1, 2, 3], [0, 1, 1])
            w.close()
        self.assertEqual(read_independently(path)[1:], (1, [([1, 2, 3], [0, 1, 1])]))

    def test_read_header_refusals_name_the_file(self):
        good = self.write("e.bin", [([1, 2], [0, 1])], 2, 2, 1)
        with open(good, "ab") as f:
            f.write(b"x")
        with self.assertRaisesRegex(UserError, r"e.bin: file is 1031 bytes, its header says 1 rows of 2 tokens = 1030"):
            masked_rows.read_header(good)
        other = os.path.join(self.tmp, "f.bin")
        with open(other, "wb") as f:
            f.write(shard_headers.header_bytes(0, 2))
        with self.assertRaisesRegex(UserError, r"f.bin: bad magic 20240520 \(a masked-row shard has 20261215\)"):
            masked_rows.read_header(other)
        # The token-shard reader tells a masked-row shard apart.
        with self.assertRaisesRegex(UserError, r"e.bin: a masked-row shard \(nfn sft's rows of tokens and loss "
                                               r"masks\), not a token shard"):
            shard_headers.read_header(good)


if __name__ == "__main__":
    unittest.main()
