"""nfn._native's token shard reader and batch sampler against a numpy reader written here."""
import os
import tempfile
import unittest

import numpy as np

from nfn import _native

MASK = (1 << 64) - 1


def write_shard(path, tokens, token_bytes=2):
    """llm.c's layout: 256 int32 header (magic, version, count), then the tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens)) if token_bytes == 2 else (20240801, 7, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2" if token_bytes == 2 else "<u4").tobytes())


def numpy_tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    dtype = "<u2" if header[0] == 20240520 else "<u4"
    return np.fromfile(path, dtype=dtype, offset=1024)[: header[2]]


def reference_order(n, seed, epoch):
    """splitmix64 + Fisher-Yates, as documented in cc/data/token_shards.h."""
    order = list(range(n))
    if seed == 0:
        return order
    state = (seed ^ (epoch * 0x9E3779B97F4A7C15)) & MASK
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def reference_batches(paths, B, T, seed, count):
    """llm.c's contiguous windows, shard by shard in each epoch's order."""
    data = [numpy_tokens(p) for p in paths]
    out, epoch = [], 0
    while len(out) < count:
        for s in reference_order(len(paths), seed, epoch):
            offset = 0
            while offset + B * T + 1 <= len(data[s]) and len(out) < count:
                window = data[s][offset: offset + B * T + 1].astype(np.int32)
                out.append((window[:-1].reshape(B, T), window[1:].reshape(B, T)))
                offset += B * T
        epoch += 1
    return out


class NativeShardsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        rng = np.random.default_rng(7)
        self.paths = []
        for i, n in enumerate([1000, 37, 513, 2049, 800]):
            path = os.path.join(self.dir, f"fineweb_train_{i:06d}.bin")
            write_shard(path, rng.integers(0, 50257, size=n))
            self.paths.append(path)
        write_shard(os.path.join(self.dir, "fineweb_val_000000.bin"), rng.integers(0, 50257, size=300))

    def test_discovery_matches_headers(self):
        shards = _native.find_shards(self.dir, "train")
        self.assertEqual([s[0] for s in shards], self.paths)
        self.assertEqual([s[1] for s in shards], [len(numpy_tokens(p)) for p in self.paths])
        val = _native.find_validation_siblings(self.paths[3])
        self.assertEqual([(os.path.basename(p), n, w) for p, n, w in val], [("fineweb_val_000000.bin", 300, 2)])

    def test_shards_named_after_any_dataset(self):
        # nfn names shards after their dataset (shakespeare_train_000000.bin); llm.c and older
        # nfn cache entries name them fineweb_*: the reader takes both.
        for prefix in ("shakespeare", "moby-dick", "fineweb"):
            d = os.path.join(self.dir, prefix)
            os.mkdir(d)
            for split, n in (("train", 100), ("train", 50), ("val", 30)):
                index = len([f for f in os.listdir(d) if f"_{split}_" in f])
                write_shard(os.path.join(d, f"{prefix}_{split}_{index:06d}.bin"), np.arange(n))
            train = _native.find_shards(d, "train")
            self.assertEqual([(os.path.basename(p), n) for p, n, _ in train],
                             [(f"{prefix}_train_000000.bin", 100), (f"{prefix}_train_000001.bin", 50)])
            self.assertEqual([(os.path.basename(p), n) for p, n, _ in _native.find_shards(d, "val")],
                             [(f"{prefix}_val_000000.bin", 30)])
            self.assertEqual([os.path.basename(p) for p, _, _ in _native.find_validation_siblings(train[1][0])],
                             [f"{prefix}_val_000000.bin"])

    def test_batches_match_numpy_reference_for_seeds(self):
        shards = _native.find_shards(self.dir, "train")
        for seed in (0, 1, 20240520):
            with self.subTest(seed=seed):
                self.assertEqual(_native.shard_order(5, seed, 3), reference_order(5, seed, 3))
                sampler = _native.TokenBatchSampler(shards, 4, 16, seed)
                # 999//64 + 512//64 + 2048//64 + 799//64 windows per epoch; 37 tokens is too short.
                self.assertEqual(sampler.batches_per_epoch, 15 + 8 + 32 + 12)
                want = reference_batches(self.paths, 4, 16, seed, 150)  # over two epochs
                for step, (x, y) in enumerate(want):
                    inputs, targets = sampler.next()
                    self.assertEqual(inputs.dtype, np.int32)
                    np.testing.assert_array_equal(inputs, x, err_msg=f"step {step}")
                    np.testing.assert_array_equal(targets, y, err_msg=f"step {step}")
                window = np.frombuffer(sampler.last_window(), dtype="<u2").astype(np.int32)
                np.testing.assert_array_equal(window[:-1], want[-1][0].ravel())
                self.assertEqual(sampler.position()[0], 2)

    def test_uint32_shards(self):
        d = os.path.join(self.dir, "u32")
        os.mkdir(d)
        tokens = np.arange(100000, 100000 + 300, dtype=np.uint32)
        write_shard(os.path.join(d, "big_train_000000.bin"), tokens, token_bytes=4)
        sampler = _native.TokenBatchSampler(_native.find_shards(d, "train"), 2, 8, 0)
        self.assertEqual(sampler.token_bytes, 4)
        x, y = sampler.next()
        np.testing.assert_array_equal(x.ravel(), tokens[:16].astype(np.int32))
        np.testing.assert_array_equal(y.ravel(), tokens[1:17].astype(np.int32))

    def test_errors_name_the_file(self):
        bad = os.path.join(self.dir, "fineweb_train_000009.bin")
        with open(self.paths[0], "rb") as f:
            data = f.read()
        with open(bad, "wb") as f:
            f.write(data[:-2])
        with self.assertRaisesRegex(ValueError, "fineweb_train_000009.bin: truncated: file is 3022 bytes"):
            _native.find_shards(self.dir, "train")
        with self.assertRaisesRegex(ValueError, "no shard holds B\\*T\\+1"):
            _native.TokenBatchSampler(_native.find_shards(self.paths[1], "train"), 4, 16, 0)
        sampler = _native.TokenBatchSampler(_native.find_shards(self.paths[0], "train"), 1, 8, 0)
        with self.assertRaisesRegex(ValueError, "out of range"):
            sampler.seek(0, 1, 0)


if __name__ == "__main__":
    unittest.main()
