"""Best-fit packing: a hand-worked example, then invariants over random sequences."""
import random
import unittest

from nfn.chat.packing import BestFitPacker, pack_conversations, pack_documents

BOS, PAD = 0, 99


def seq(length, tag):
    """A BOS-led sequence whose tokens name it: tag*1000 + position."""
    return [BOS] + [tag * 1000 + i for i in range(1, length)]


class HandWorkedTest(unittest.TestCase):
    def test_pad_mode(self):
        # Row length 8. Sequences of lengths 5, 3, 6, 2 with buffer 4:
        # row 1 takes the longest that fits (6), then the longest <= 2 (2): full.
        # row 2 takes 5, then 3: full. Nothing is padded or cropped.
        a, b, c, d = seq(5, 1), seq(3, 2), seq(6, 3), seq(2, 4)
        rows, stats = pack_conversations([(x, [1] * len(x)) for x in (a, b, c, d)], 8, BOS, PAD,
                                         buffer_size=4)
        self.assertEqual([r[0] for r in rows], [c + d, a + b])
        self.assertEqual((stats.rows, stats.padding, stats.tokens_cropped), (2, 0, 0))
        self.assertEqual(stats.utilisation, 1.0)

    def test_pad_mode_pads_with_mask_zero(self):
        a, b = seq(5, 1), seq(5, 2)
        rows, stats = pack_conversations([(a, [0] + [1] * 4), (b, [0] + [1] * 4)], 8, BOS, PAD)
        self.assertEqual(rows[0], (a + [PAD] * 3, [0, 1, 1, 1, 1, 0, 0, 0]))
        self.assertEqual(rows[1], (b + [PAD] * 3, [0, 1, 1, 1, 1, 0, 0, 0]))
        self.assertEqual((stats.padding, stats.utilisation), (6, 10 / 16))

    def test_crop_mode_fills_rows(self):
        # Row 8: longest first (6) leaves 2; nothing fits, so the shortest (5) is cropped to 2.
        a, b = seq(6, 1), seq(5, 2)
        rows, stats = pack_documents([a, b, seq(7, 3)], 8, BOS, buffer_size=4)
        self.assertEqual(rows[0][0], seq(7, 3) + seq(5, 2)[:1])
        # Last row: the source ran out, so the rest is padding (BOS ids, mask 0).
        self.assertEqual(rows[1], (a + [BOS, BOS], [1] * 6 + [0, 0]))
        self.assertEqual(stats.cropped_sequences, 1)
        self.assertEqual(stats.tokens_cropped, 4)

    def test_too_long_sequence_is_cropped_to_the_row(self):
        rows, stats = pack_conversations([(seq(20, 1), [1] * 20)], 8, BOS, PAD)
        self.assertEqual(rows, [(seq(20, 1)[:8], [1] * 8)])
        self.assertEqual((stats.cropped_sequences, stats.tokens_cropped), (1, 12))

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            list(BestFitPacker(8, BOS, PAD).pack([[5, 6, 7]]))  # no BOS
        with self.assertRaises(ValueError):
            list(BestFitPacker(8, BOS, PAD).pack([([BOS, 1], [1])]))  # mask length
        with self.assertRaises(ValueError):
            BestFitPacker(1, BOS, PAD)
        with self.assertRaises(ValueError):
            BestFitPacker(8, BOS)  # pad mode without a pad id


class InvariantsTest(unittest.TestCase):
    def check(self, crop_to_fill, seed):
        rng = random.Random(seed)
        row_len = rng.choice([16, 33, 64])
        seqs = [seq(rng.randint(2, 90), tag) for tag in range(1, 300)]
        masks = [[rng.randint(0, 1) for _ in s] for s in seqs]
        mask_of = {t: m for s, ms in zip(seqs, masks) for t, m in zip(s[1:], ms[1:])}
        packer = BestFitPacker(row_len, BOS, pad_id=None if crop_to_fill else PAD,
                               buffer_size=rng.choice([1, 8, 32]), crop_to_fill=crop_to_fill)
        rows = list(packer.pack(zip(seqs, masks)))
        stats = packer.stats
        seen = []
        for ids, mask in rows:
            self.assertEqual((len(ids), len(mask)), (row_len, row_len))
            self.assertEqual(ids[0], BOS)  # every row starts a sequence
            for t, m in zip(ids, mask):
                if t not in (BOS, PAD):
                    self.assertEqual(m, mask_of[t])  # masks travel with their tokens
                    seen.append(t)
        padding = sum(1 for ids, _ in rows for t in ids if t == PAD)
        # Each sequence's tokens appear once, in order, as a prefix of the sequence.
        by_tag = {}
        for t in seen:
            by_tag.setdefault(t // 1000, []).append(t % 1000)
        for tag, positions in by_tag.items():
            self.assertEqual(positions, list(range(1, len(positions) + 1)))
        self.assertEqual(stats.sequences, len(seqs))
        self.assertEqual(stats.tokens_packed + stats.padding, stats.rows * row_len)
        self.assertEqual(stats.tokens_in, sum(map(len, seqs)))
        if crop_to_fill:
            self.assertLessEqual(stats.padding, row_len)  # only the final row
        else:
            self.assertEqual(stats.padding, padding)
            crop = sum(max(0, len(s) - row_len) for s in seqs)
            self.assertEqual(stats.tokens_cropped, crop)  # pad mode crops only overlong ones

    def test_invariants(self):
        for seed in range(12):
            for crop in (False, True):
                with self.subTest(seed=seed, crop=crop):
                    self.check(crop, seed)


if __name__ == "__main__":
    unittest.main()
