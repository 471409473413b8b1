"""Block-quantized weights: nfn's quantizer against the `gguf` package (llama.cpp's Python
reference: its quantize gives the same Q8_0 and Q4_1 bytes, its dequantize the same values) and
against NF4's definition written here; the engine with its block matrices kept quantized gives
exactly the logits of the f32 engine on the dequantized weights, in about a quarter (q4_1) of
the bytes; bad names are refused."""
import json
import os
import tempfile
import unittest

import gguf
import numpy as np
from gguf import quants

from nfn import _native
from decoder_reference import random_weights
from decoder_engine_test import LLAMA, NANOCHAT, write_weights

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
GGML = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_1": gguf.GGMLQuantizationType.Q4_1}


def values(rng, n):
    x = (rng.standard_normal(n) * rng.uniform(0.01, 3, size=n // 32).repeat(32)).astype(np.float32)
    x[:32] = 0.0            # an all-zero block
    x[32:64] = 1.25         # a constant block
    x[64] = 50.0            # an outlier
    return x


def nf4_reference(x):
    """NF4 as QLoRA defines it, in blocks of 32: the f16 absmax, and each value's nearest level."""
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1).astype(np.float16).astype(np.float32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    scaled = np.divide(blocks, amax, out=np.zeros_like(blocks), where=amax > 0)
    codes = np.abs(scaled[..., None] - NF4).argmin(axis=-1)
    return (d[:, None] * NF4[codes]).reshape(-1)


class QuantizerTest(unittest.TestCase):
    def test_same_bytes_and_values_as_gguf(self):
        x = values(np.random.default_rng(0), 32 * 4096)
        for name, ggml in GGML.items():
            ours = _native.quantize(x, name)
            theirs = quants.quantize(x.reshape(-1, 32), ggml).reshape(-1)
            same = np.mean(np.all(ours.reshape(-1, theirs.size // 4096) == theirs.reshape(-1, theirs.size // 4096),
                                  axis=1))
            self.assertGreaterEqual(same, 0.999, f"{name}: {same:.4%} of blocks byte-identical to gguf's")
            got = _native.dequantize(ours, name)
            want = quants.dequantize(ours.reshape(-1, ours.size // 4096), ggml).reshape(-1)
            # gguf computes d q + m as two roundings; nfn as one fused multiply-add.
            np.testing.assert_array_max_ulp(got, want.astype(np.float32), maxulp=1)
            step = np.abs(x.reshape(-1, 32)).max(axis=1).repeat(32) / (127 if name == "q8_0" else 7.5)
            self.assertTrue(np.all(np.abs(got - x) <= step * 0.6 + 1e-30), name)

    def test_nf4_against_its_definition(self):
        x = values(np.random.default_rng(1), 32 * 2048)
        got = _native.dequantize(_native.quantize(x, "nf4"), "nf4")
        want = nf4_reference(x)
        self.assertGreaterEqual(np.mean(got == want), 0.999)
        np.testing.assert_allclose(got, want, atol=np.abs(x).max() * 0.2)

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "'q4_k' is not q8_0, q4_1 or nf4"):
            _native.quantize(np.zeros(32, np.float32), "q4_k")
        with self.assertRaisesRegex(ValueError, "not a multiple of 32"):
            _native.quantize(np.zeros(31, np.float32), "q8_0")
        with self.assertRaisesRegex(ValueError, "not whole q4_1 blocks"):
            _native.dequantize(np.zeros(21, np.uint8), "q4_1")


class QuantizedEngineTest(unittest.TestCase):
    def test_quantized_engine_equals_f32_on_dequantized_weights(self):
        with tempfile.TemporaryDirectory() as tmp:
            for cfg in (NANOCHAT, dict(LLAMA, channels=32, head_dim=8, hidden=64)):
                cfg = dict(cfg, channels=32, hidden=max(cfg["hidden"], 64))
                layout = _native.NativeDecoder(**cfg).layout()
                flat = random_weights(layout, np.random.default_rng(2))
                path = os.path.join(tmp, "model.safetensors")
                write_weights(path, cfg, layout, flat)
                tokens = np.random.default_rng(3).integers(0, cfg["vocab_size"], 12).astype(np.int32)
                f32 = _native.InferenceEngine(weights_file=path)
                for qtype in ("q8_0", "q4_1", "nf4"):
                    # The block matrices (each layer's q/k/v, output, up and down; 32 columns a
                    # row) through the quantizer, everything else as it was.
                    rounded = flat.copy()
                    matrix_bytes = 0
                    for name, rows, cols, offset in layout:
                        if name.split(".")[-2:-1] and name.split(".")[-2] in ("c_q", "c_k", "c_v", "c_proj", "c_fc", "q_proj", "k_proj",
                                                   "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                            block = flat[offset:offset + rows * cols]
                            q = _native.quantize(block, qtype)
                            rounded[offset:offset + rows * cols] = _native.dequantize(q, qtype)
                            matrix_bytes += rows * cols * 4 - q.size
                    rounded_path = os.path.join(tmp, "rounded.safetensors")
                    write_weights(rounded_path, cfg, layout, rounded)
                    quantized = _native.InferenceEngine(weights_file=path, quantize=qtype)
                    reference = _native.InferenceEngine(weights_file=rounded_path)
                    got = quantized.forward(tokens, all_logits=True)
                    want = reference.forward(tokens, all_logits=True)
                    self.assertTrue(np.array_equal(got, want), f"{cfg['family']} {qtype}")
                    self.assertFalse(np.array_equal(got, f32.forward(tokens, all_logits=True)))
                    f32.reset()
                    self.assertEqual(quantized.weight_bytes, f32.weight_bytes - matrix_bytes)
                    self.assertGreater(matrix_bytes, 0)
            with self.assertRaisesRegex(ValueError, "quantize: 'int8' is not q8_0, q4_1, nf4 or bf16"):
                _native.InferenceEngine(weights_file=path, quantize="int8")


if __name__ == "__main__":
    unittest.main()
