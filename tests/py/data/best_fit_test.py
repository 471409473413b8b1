"""nfn._native.BestFitSampler (cc/data/best_fit.h) against nanochat's BOS-aligned best-fit
packing written here in plain Python from its description: rows, stream positions and the
buffer after every batch, over several epochs, resumed from a saved buffer, and bad input."""
import os
import tempfile
import unittest

import numpy as np
from best_fit_reference import ReferenceBestFit
from native_shards_test import numpy_tokens, write_shard

from nfn import _native

BOS = 50256


def make_documents(rng, count, longest, vocab, bos):
    """Token lists, each a BOS and then ids other than BOS; lengths 1..longest."""
    docs = []
    for _ in range(count):
        body = rng.integers(0, vocab - 1, size=int(rng.integers(0, longest)))
        body[body >= bos] += 1  # never the BOS id
        docs.append([bos] + body.tolist())
    return docs


class BestFitTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        rng = np.random.default_rng(11)
        self.paths = []
        # Four shards: one that starts inside a document (its first tokens are no document's),
        # one with no BOS at all, one whose documents include some longer than a row.
        layouts = [
            sum(make_documents(rng, 40, 30, 50257, BOS), []),
            [7, 8, 9] + sum(make_documents(rng, 25, 12, 50257, BOS), []),
            [5] * 60,
            sum(make_documents(rng, 10, 80, 50257, BOS), []),
        ]
        for i, tokens in enumerate(layouts):
            path = os.path.join(self.dir, f"docs_train_{i:06d}.bin")
            write_shard(path, tokens)
            self.paths.append(path)
        self.data = [numpy_tokens(p) for p in self.paths]
        self.shards = _native.find_shards(self.dir, "train")

    def check_against_reference(self, B, T, seed, buffer, batches):
        sampler = _native.BestFitSampler(self.shards, B, T, seed, BOS, buffer)
        ref = ReferenceBestFit(self.data, B, T, seed, BOS, buffer)
        for step in range(batches):
            x, y = sampler.next()
            want_x, want_y = ref.batch()
            np.testing.assert_array_equal(x, want_x, err_msg=f"inputs of batch {step}")
            np.testing.assert_array_equal(y, want_y, err_msg=f"targets of batch {step}")
            self.assertEqual(sampler.position(), ref.position, f"batch {step}")
            self.assertEqual(sampler.buffered(), ref.buffer, f"batch {step}")
        self.assertTrue((x[:, 0] == BOS).all())  # every row starts at a document
        self.assertEqual((sampler.tokens_placed, sampler.tokens_cropped), (ref.placed, ref.cropped))
        return sampler, ref

    def test_rows_match_reference_over_epochs(self):
        total = sum(len(d) for d in self.data)
        cropped = 0
        for B, T, seed, buffer in [(3, 16, 0, 7), (2, 24, 1, 1), (4, 8, 20240520, 1000), (1, 100, 5, 3)]:
            with self.subTest(B=B, T=T, seed=seed, buffer=buffer):
                batches = 3 * total // (B * (T + 1)) + 1  # past two epochs
                sampler, ref = self.check_against_reference(B, T, seed, buffer, batches)
                self.assertGreaterEqual(sampler.position()[0], 2)
                self.assertEqual(sampler.batches_per_epoch, total // (B * (T + 1)))
                cropped += ref.cropped
        self.assertGreater(cropped, 0)  # the crop path ran

    def test_a_buffer_larger_than_the_data_holds_documents_of_several_epochs(self):
        sampler, ref = self.check_against_reference(2, 16, 3, 1000, 4)
        documents = sum(len(np.flatnonzero(d == BOS)) for d in self.data)
        self.assertGreaterEqual(sampler.position()[0], 1000 // documents)
        self.assertEqual(len(ref.buffer), 999)  # refilled before its last choice

    def test_restore_continues_the_same_rows(self):
        a = _native.BestFitSampler(self.shards, 3, 16, 9, BOS, 5)
        for _ in range(7):
            a.next()
        position, buffered = a.position(), a.buffered()
        following = [a.next() for _ in range(12)]
        b = _native.BestFitSampler(self.shards, 3, 16, 9, BOS, 5)
        b.restore(*position, buffered)
        self.assertEqual((b.position(), b.buffered()), (position, buffered))
        for step, (x, y) in enumerate(following):
            got_x, got_y = b.next()
            np.testing.assert_array_equal(got_x, x, err_msg=f"batch {step}")
            np.testing.assert_array_equal(got_y, y, err_msg=f"batch {step}")
        # seek: the same stream, an empty buffer; the reference started there agrees.
        c = _native.BestFitSampler(self.shards, 3, 16, 9, BOS, 5)
        c.seek(*position)
        self.assertEqual(c.buffered(), [])

    def test_restore_refuses_what_is_not_a_document(self):
        s = _native.BestFitSampler(self.shards, 2, 16, 0, BOS, 4)
        s.next()
        good = s.buffered()
        shard, offset, length = next(d for d in good if d[1] + d[2] < len(self.data[d[0]]))
        for bad, why in [((9, 0, 5), "buffered document 0 \\(shard 9, offset 0, length 5\\): shard: out of range"),
                         ((shard, offset + 1, length - 1), "not a document of BOS id 50256"),
                         ((shard, offset, length + 1), "not a document of BOS id 50256"),
                         ((shard, offset, 10 ** 9), "not a token range"),
                         ((1, 0, 3), "not a document of BOS id 50256")]:  # the tokens before shard 1's first BOS
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, why):
                s.restore(*s.position(), [bad] + good)

    def test_uint32_shards_and_vocab_check(self):
        d = os.path.join(self.dir, "u32")
        os.mkdir(d)
        bos = 70000
        tokens = [bos, 100000, 100001, bos, 100002, bos] * 10
        write_shard(os.path.join(d, "big_train_000000.bin"), tokens, token_bytes=4)
        shards = _native.find_shards(d, "train")
        s = _native.BestFitSampler(shards, 2, 5, 0, bos, 4)
        ref = ReferenceBestFit([np.array(tokens)], 2, 5, 0, bos, 4)
        for _ in range(5):
            x, y = s.next()
            want_x, want_y = ref.batch()
            np.testing.assert_array_equal(x, want_x)
            np.testing.assert_array_equal(y, want_y)
        s.set_vocab_size(100001)
        with self.assertRaisesRegex(ValueError, "big_train_000000.bin: token id 10000[12] at token \\d+ is out of "
                                                "range for vocab size 100001"):
            for _ in range(5):
                s.next()

    def test_bad_input_is_one_line(self):
        with self.assertRaisesRegex(ValueError, "no document start: BOS id 1234 is in none of the 4 shards"):
            _native.BestFitSampler(self.shards, 2, 16, 0, 1234, 10)
        with self.assertRaisesRegex(ValueError, "a buffer of 0 documents"):
            _native.BestFitSampler(self.shards, 2, 16, 0, BOS, 0)
        total = sum(len(d) for d in self.data)
        with self.assertRaisesRegex(ValueError, f"the shards hold {total} tokens, fewer than one batch"):
            _native.BestFitSampler(self.shards, 1, total, 0, BOS, 10)
        s = _native.BestFitSampler(self.shards, 2, 16, 0, BOS, 10)
        with self.assertRaisesRegex(ValueError, "out of range for 4 shards"):
            s.seek(0, 4, 0)
        with self.assertRaisesRegex(ValueError, "past the last one the sampler takes"):
            s.seek(2 ** 62, 0, 0)


if __name__ == "__main__":
    unittest.main()
