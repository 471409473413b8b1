"""bf16 weights in the decoder engine (quantize="bf16"): the block matrices (each layer's fused
qkv, attention output, MLP up and down) are kept as bf16 words, so the weights shrink by two
bytes a matrix value, and the logits are

- within 2% of the logits' scale of a float64 PyTorch reference on the same weights with those
  matrices rounded to bf16 here (round to nearest even, written in this test), and within the
  same of the f32 engine: on a CPU with bf16 matmuls the GEMMs also round their activations to
  bf16 (f32 accumulation), which is what the tolerance allows for;
- bit for bit the f32 engine's on the rounded weights where the GEMMs stay f32 (a CPU without
  bf16 matmuls; the CUDA library under the emulator when NFN_EMULATED_CUDA_OPS_LIB is set).
"""
import os
import tempfile
import unittest

import numpy as np
import torch

from nfn import _native
from decoder_reference import llama_logits, nanochat_logits, random_weights, split
from decoder_engine_test import LLAMA, NANOCHAT, write_weights

MATRICES = ("c_q", "c_k", "c_v", "c_proj", "c_fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
            "down_proj")
TOLERANCE = 0.02  # of the reference logits' largest magnitude


def bf16_round(x):
    """f32 values rounded to the nearest bf16 (ties to even), as f32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def rounded_matrices(layout, flat):
    """flat with every block matrix rounded to bf16, and the number of values rounded."""
    out, count = flat.copy(), 0
    for name, rows, cols, offset in layout:
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in MATRICES and rows > 1:
            out[offset:offset + rows * cols] = bf16_round(flat[offset:offset + rows * cols])
            count += rows * cols
    return out, count


class Bf16EngineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def check_family(self, cfg, reference_logits):
        layout = _native.NativeDecoder(**cfg).layout()
        flat = random_weights(layout, np.random.default_rng(11))
        rounded, count = rounded_matrices(layout, flat)
        self.assertGreater(count, 0)
        self.assertFalse(np.array_equal(rounded, flat))
        path, rounded_path = (os.path.join(self.dir.name, f"{cfg['family']}{s}.safetensors") for s in ("", "_r"))
        write_weights(path, cfg, layout, flat)
        write_weights(rounded_path, cfg, layout, rounded)
        V, T = cfg["vocab_size"], cfg["max_seq_len"]
        tokens = np.random.default_rng(12).integers(0, V, size=T).astype(np.int32)
        p = split(torch.tensor(rounded, dtype=torch.float64), layout)
        want = reference_logits(p, torch.tensor(tokens[None]).long(), cfg)[0, :, :V].numpy()
        scale = np.abs(want).max()

        f32 = _native.InferenceEngine(weights_file=path)
        bf16 = _native.InferenceEngine(weights_file=path, quantize="bf16")
        self.assertEqual(bf16.weight_bytes, f32.weight_bytes - 2 * count)
        got = bf16.forward(tokens, all_logits=True)
        np.testing.assert_allclose(got, want, atol=TOLERANCE * scale, rtol=0)
        np.testing.assert_allclose(got, f32.forward(tokens, all_logits=True), atol=TOLERANCE * scale, rtol=0)
        exact = _native.InferenceEngine(weights_file=rounded_path).forward(tokens, all_logits=True)
        if bf16.matmul == "f32":
            self.assertTrue(np.array_equal(got, exact))
        else:
            self.assertEqual(bf16.matmul, "bf16")
            self.assertFalse(np.array_equal(got, exact))  # the activations rounded too
        # Through the cache one token at a time: the same logits as the prefill's rows.
        bf16.reset()
        steps = np.concatenate([bf16.forward(tokens[i:i + 1]) for i in range(T)])
        np.testing.assert_allclose(steps, want, atol=TOLERANCE * scale, rtol=0)

        emulated = os.environ.get("NFN_EMULATED_CUDA_OPS_LIB")
        if emulated:  # f32 GEMMs on widened bf16 matrices: exactly the f32 engine on rounded weights
            lib = os.path.abspath(emulated)
            on_cuda = _native.InferenceEngine(weights_file=path, library=lib, quantize="bf16")
            self.assertEqual(on_cuda.matmul, "f32")
            self.assertTrue(np.array_equal(
                on_cuda.forward(tokens, all_logits=True),
                _native.InferenceEngine(weights_file=rounded_path, library=lib).forward(tokens, all_logits=True)))

    def test_nanochat(self):
        self.check_family(NANOCHAT, nanochat_logits)

    def test_llama(self):
        self.check_family(LLAMA, llama_logits)

    def test_bad_name(self):
        with self.assertRaisesRegex(ValueError, "quantize: 'fp16' is not q8_0, q4_1, nf4 or bf16"):
            _native.InferenceEngine(weights_file="unused.safetensors", quantize="fp16")


if __name__ == "__main__":
    unittest.main()
