"""nfn's C++ safetensors reader and writer (cc/ckpt/safetensors.h, through the test tool
tests/cc/ckpt:safetensors_tool) against the `safetensors` package. Files nfn writes load in
the package with the same names, shapes, dtypes, metadata and values (F32 bit for bit, BF16
bit for bit as torch rounds f32 to bf16); files the package writes (F32, BF16, F16, with
metadata) read in nfn to exactly the values torch widens them to; each bad file or request is
one line on stderr naming the file, and exit 1."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file as load_torch
from safetensors.torch import save_file

TOOL = os.environ["NFN_SAFETENSORS_TOOL"]

# (name, offset into the parameter block, shape): out of block order, a scalar, an empty one.
TENSORS = [("model.layers.0.mlp.w", 300, (16, 24)), ("model.embed_tokens.weight", 0, (37, 8)),
           ("model.norm.scale", 296, ()), ("model.empty", 299, (0, 4)), ("lm_head.bias", 700, (45,))]
BLOCK = 800
METADATA = {"format": "pt", "family": "llama", "geometry": json.dumps({"layers": 2, "channels": 8}),
            "note": "caf\u00e9 \u2713 \"quoted\" back\\slash"}


def run(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)


def parameters():
    """A block of many magnitudes, with bf16 rounding ties both ways and the special values."""
    rng = np.random.default_rng(5)
    block = (rng.standard_normal(BLOCK) * np.exp2(rng.integers(-30, 30, BLOCK))).astype(np.float32)
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x00018000, 0x7F7FFFFF, 0x3F80FFFF], np.uint32)
    block[700:706] = ties.view(np.float32)
    block[706:716] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38, -3.39e38, 1e-40, -3e-39, 1e-45]
    return block


def tensor_args():
    return [arg for name, offset, shape in TENSORS for arg in ("tensor", name, offset, ",".join(map(str, shape)))]


class NfnWritesPackageReads(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.block = parameters()
        self.params = os.path.join(self.dir, "params.f32")
        self.block.tofile(self.params)

    def write(self, dtype):
        path = os.path.join(self.dir, f"{dtype}.safetensors")
        meta = [arg for key, value in METADATA.items() for arg in ("meta", key, value)]
        r = run("write", path, self.params, dtype, *meta, *tensor_args())
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        return path

    def loaded(self, dtype, load, framework):
        """The tool's file as the package loads it, names and metadata checked:
        [(name, tensor, the block's values it was written from)]."""
        path = self.write(dtype)
        loaded = load(path)
        self.assertEqual(sorted(loaded), sorted(name for name, _, _ in TENSORS))
        with safe_open(path, framework=framework) as f:
            self.assertEqual(f.metadata(), METADATA)
        return [(name, loaded[name], self.block[offset:offset + int(np.prod(shape))].reshape(shape))
                for name, offset, shape in TENSORS]

    def test_f32(self):
        for name, got, want in self.loaded("f32", load_numpy, "np"):
            self.assertEqual((got.dtype, got.shape), (np.float32, want.shape), name)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=name)

    def test_bf16(self):
        loaded = self.loaded("bf16", load_torch, "pt")
        for name, got, source in loaded:
            self.assertEqual((got.dtype, tuple(got.shape)), (torch.bfloat16, source.shape), name)
            want = torch.from_numpy(source).to(torch.bfloat16)  # torch's own round to nearest even
            nan = torch.isnan(want)
            self.assertTrue(torch.equal(torch.isnan(got), nan), name)
            self.assertTrue(torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan]), name)
        bias = {name: got for name, got, _ in loaded}["lm_head.bias"].float()
        self.assertEqual(bias[:2].tolist(), [1.0, 1.015625])  # the two ties: down to even, up to even

    def test_layout(self):
        """8-byte length, JSON padded with spaces to a multiple of 8, tensors back to back in
        the order given, the file ending where the last one does."""
        path = self.write("f32")
        with open(path, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        self.assertEqual(n % 8, 0)
        text = raw[8:8 + n].decode("utf-8")
        self.assertLess(len(text) - len(text.rstrip(" ")), 8)
        header = json.loads(text)
        self.assertEqual(list(header), ["__metadata__"] + [name for name, _, _ in TENSORS])
        at = 0
        for name, _, shape in TENSORS:
            size = 4 * int(np.prod(shape))
            self.assertEqual(header[name], {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + size]})
            at += size
        self.assertEqual(len(raw), 8 + n + at)


class PackageWritesNfnReads(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        g = torch.Generator().manual_seed(3)
        halves = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(torch.float16)  # every half
        self.tensors = {
            "a.f32": torch.randn(3, 5, generator=g) * 1e3,
            "b.bf16": (torch.randn(4, 4, generator=g) * 1e-20).to(torch.bfloat16),
            "c.f16": halves.reshape(256, 256),
            "d.scalar": torch.tensor(-2.5, dtype=torch.float32),
            "e.bf16": torch.tensor([float("inf"), float("nan"), -0.0, 1e-40], dtype=torch.bfloat16),
        }
        self.metadata = {"family": "llama", "tokenizer": "sha256:0123", "empty": ""}
        self.path = os.path.join(self.dir, "package.safetensors")
        save_file(self.tensors, self.path, metadata=self.metadata)

    def test_header(self):
        r = run("header", self.path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        got = json.loads(r.stdout)
        with open(self.path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        self.assertEqual(got["data_start"], 8 + n)
        self.assertEqual(got["metadata"], self.metadata)
        self.assertEqual(got["tensors"], {name: entry for name, entry in header.items() if name != "__metadata__"})
        dtypes = {name: entry["dtype"] for name, entry in got["tensors"].items()}
        self.assertEqual(dtypes, {"a.f32": "F32", "b.bf16": "BF16", "c.f16": "F16", "d.scalar": "F32",
                                  "e.bf16": "BF16"})

    def test_values(self):
        """Each tensor at its own offset of one block, exactly what torch widens it to."""
        offsets, at = {}, 5
        for name, t in self.tensors.items():
            offsets[name] = at
            at += t.numel() + 3
        args = [arg for name, t in self.tensors.items()
                for arg in ("tensor", name, offsets[name], ",".join(map(str, t.shape)))]
        out = os.path.join(self.dir, "block.f32")
        r = run("read", self.path, out, at, *args)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        block = np.fromfile(out, dtype="<f4")
        self.assertEqual(block.size, at)
        filled = np.zeros(at, bool)
        for name, t in self.tensors.items():
            want = t.float().reshape(-1).numpy()
            got = block[offsets[name]:offsets[name] + t.numel()]
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_array_equal(got[~np.isnan(want)].view(np.uint32),
                                          want[~np.isnan(want)].view(np.uint32), err_msg=name)
            filled[offsets[name]:offsets[name] + t.numel()] = True
        self.assertTrue(np.all(block[~filled] == 0), "values written outside the tensors' ranges")


class BadInputs(unittest.TestCase):
    """Each refusal is one line on stderr that starts with the file's path, and exit 1."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.good = os.path.join(self.dir, "good.safetensors")
        save_file({"w": torch.ones(2, 3), "i": torch.arange(4)}, self.good)  # i is I64
        with open(self.good, "rb") as f:
            self.raw = f.read()
        (self.n,) = struct.unpack("<Q", self.raw[:8])
        self.header = json.loads(self.raw[8:8 + self.n])

    def refused(self, args, path, want):
        r = run(*args)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, f"{path}: {want}\n")

    def file(self, name, raw):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(raw)
        return path

    def with_header(self, name, header):
        text = json.dumps(header).encode()
        return self.file(name, struct.pack("<Q", len(text)) + text + self.raw[8 + self.n:])

    def test_refusals(self):
        truncated = self.file("truncated", self.raw[:5])
        self.refused(["header", truncated], truncated, "truncated: 5 bytes, the header length alone is 8")
        past = self.file("past", struct.pack("<Q", len(self.raw)) + self.raw[8:])
        self.refused(["header", past], past,
                     f"header length {len(self.raw)} runs past the end of the file ({len(self.raw)} bytes)")
        bad_json = self.file("bad_json", struct.pack("<Q", 8) + b'{"w": [ ' + self.raw[8 + self.n:])
        self.refused(["header", bad_json], bad_json, "header is not valid JSON: line 1, column 9: "
                     "unexpected end of input")
        self.refused(["header", self.good], self.good, "tensor i: dtype I64 is not supported (F32, BF16 and F16 are)")
        del self.header["i"]
        begin, end = self.header["w"]["data_offsets"]
        self.header["w"]["data_offsets"] = [begin, end - 4]
        short = self.with_header("short", self.header)
        self.refused(["header", short], short,
                     f"tensor w: data_offsets [{begin}, {end - 4}] hold 20 bytes, shape [2, 3] of F32 needs 24")
        self.header["w"]["data_offsets"] = [begin, end]
        ok = self.with_header("ok", self.header)
        self.refused(["read", ok, os.devnull, 6, "tensor", "v", 0, "2,3"], ok,
                     "tensor v is missing (want shape [2, 3])")
        self.refused(["read", ok, os.devnull, 6, "tensor", "w", 0, "3,2"], ok, "tensor w has shape [2, 3], want [3, 2]")


if __name__ == "__main__":
    unittest.main()
