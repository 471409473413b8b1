"""SmolLM2-135M-Instruct imported from its GGUF file does real work in nfn's llama.

The reference is a float64 numpy llama written here that reads the GGUF file directly (the
`gguf` package dequantizes it) and runs it as llama.cpp does: q and k as the file stores them,
in llama.cpp's permuted row order, rotated by GGML's rotary over adjacent pairs. It shares
nothing with the import's un-permutation, which puts the rows back in Hugging Face's order for
nfn's rotate_half. The imported checkpoint, read with the `safetensors` package, runs through
the native model (nfn._native.NativeDecoder, the CPU op library in f32).
"""
import json
import os
import shutil
import struct
import tempfile
import time
import unittest

import numpy as np

import smollm2_gguf

# The chat template's rendering of one user turn (the template adds SmolLM's system turn when
# the conversation has none) and the generation prompt.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTION = "What is the capital of France?"
ANSWER_TOKENS = 16
# f32 against f64 over 30 layers: the summed loss of ~60 targets, and each answer token's.
LOSS_TOLERANCE = 1e-3
TOKEN_LOSS_TOLERANCE = 1e-4


class GGUFLlama:
    """A llama in float64 from a GGUF file as llama.cpp reads it."""

    def __init__(self, path):
        import gguf
        reader = gguf.GGUFReader(path)

        def meta(key):
            return reader.fields[key].contents()

        self.n_layer = meta("llama.block_count")
        self.n_head = meta("llama.attention.head_count")
        self.n_kv = meta("llama.attention.head_count_kv")
        self.dim = meta("llama.embedding_length")
        self.head_dim = self.dim // self.n_head
        self.theta = meta("llama.rope.freq_base")
        self.eps = meta("llama.attention.layer_norm_rms_epsilon")
        self.eos = meta("tokenizer.ggml.eos_token_id")
        self.w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
            [int(d) for d in reversed(t.shape)]) for t in reader.tensors}
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, positions):
        """GGML's rotary (mode 0): pairs (x[2i], x[2i+1]) rotated by position * theta^(-2i/d)."""
        inv = self.theta ** (-np.arange(0, self.head_dim, 2) / self.head_dim)
        angle = positions[:, None, None] * inv[None, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * np.cos(angle) - x1 * np.sin(angle)
        out[..., 1::2] = x0 * np.sin(angle) + x1 * np.cos(angle)
        return out

    def forward(self, tokens, cache):
        """Logits [T, V] of tokens following the cache's positions; the cache ({layer: (K, V)},
        empty at first) grows by them."""
        start = cache.get("length", 0)
        positions = np.arange(start, start + len(tokens), dtype=np.float64)
        x = self.w["token_embd.weight"][tokens]
        group = self.n_head // self.n_kv
        for layer in range(self.n_layer):
            w = lambda name: self.w[f"blk.{layer}.{name}.weight"]  # noqa: E731
            h = self.rms_norm(x, w("attn_norm"))
            q = self.rope((h @ w("attn_q").T).reshape(len(tokens), self.n_head, self.head_dim), positions)
            k = self.rope((h @ w("attn_k").T).reshape(len(tokens), self.n_kv, self.head_dim), positions)
            v = (h @ w("attn_v").T).reshape(len(tokens), self.n_kv, self.head_dim)
            if layer in cache:
                k, v = np.concatenate([cache[layer][0], k]), np.concatenate([cache[layer][1], v])
            cache[layer] = (k, v)
            kh, vh = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # query head j reads kv head j // group
            scores = np.einsum("qhd,khd->hqk", q, kh) / np.sqrt(self.head_dim)
            future = np.arange(k.shape[0])[None, :] > positions[:, None]
            scores = np.where(future[None], -np.inf, scores)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", p, vh).reshape(len(tokens), -1)
            x = x + attn @ w("attn_output").T
            h = self.rms_norm(x, w("ffn_norm"))
            gate = h @ w("ffn_gate").T
            x = x + ((gate / (1 + np.exp(-gate))) * (h @ w("ffn_up").T)) @ w("ffn_down").T
        cache["length"] = start + len(tokens)
        return self.rms_norm(x, self.w["output_norm.weight"]) @ self.head.T

    def greedy(self, prompt, n):
        cache = {}
        logits = self.forward(np.array(prompt), cache)
        out = []
        while len(out) < n:
            token = int(np.argmax(logits[-1]))
            out.append(token)
            if token == self.eos:
                break
            logits = self.forward(np.array([token]), cache)
        return out

    def token_losses(self, inputs, targets):
        logits = self.forward(np.array(inputs), {})
        logz = logits.max(-1) + np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))
        return logz - logits[np.arange(len(targets)), targets]


@unittest.skipIf(smollm2_gguf.path() is None, smollm2_gguf.MISSING)
class SmolLM2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from nfn import tokenizers
        from nfn.weights import gguf_import
        cls.tmp = tempfile.mkdtemp()
        os.environ["NFN_ARTIFACTS_DIR"] = cls.tmp
        t0 = time.time()
        cls.result = gguf_import.import_gguf(smollm2_gguf.path())
        cls.import_seconds = time.time() - t0
        t0 = time.time()
        cls.reference = GGUFLlama(smollm2_gguf.path())
        cls.reference_seconds = time.time() - t0
        cls.tok = tokenizers.load(cls.result["tokenizer"])
        start, end = cls.tok.special_id("<|im_start|>"), cls.tok.special_id("<|im_end|>")
        newline = cls.tok.encode("\n")

        def turn(role, text):
            return [start] + cls.tok.encode(f"{role}\n{text}") + [end] + newline

        cls.prompt = turn("system", SYSTEM) + turn("user", QUESTION) + [start] + cls.tok.encode("assistant\n")
        t0 = time.time()
        cls.answer = cls.reference.greedy(cls.prompt, ANSWER_TOKENS)
        cls.greedy_seconds = time.time() - t0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def weights_file(self):
        return os.path.join(self.result["directory"], "model_00000000.bin")

    def native_model(self):
        from nfn import _native
        g = self.result["geometry"]
        # The context only sizes what the positions may reach; the weights do not depend on it.
        model = _native.NativeDecoder("llama", 128, g["vocab_size"], g["padded_vocab_size"], g["num_layers"],
                                      g["num_heads"], g["num_kv_heads"], g["head_dim"], g["channels"],
                                      g["mlp_hidden"], rope_theta=g["rope_theta"], tied_head=g["tied_head"],
                                      window_pattern=g["window_pattern"], muon=False)
        return model

    def test_answer_names_paris(self):
        text = self.tok.decode(self.answer)
        print(f"\nimport {self.import_seconds:.1f} s; reference load {self.reference_seconds:.1f} s, "
              f"{len(self.prompt)}-token prompt + {len(self.answer)} greedy tokens {self.greedy_seconds:.1f} s: "
              f"{text!r}")
        self.assertIn("Paris", text)

    def test_kv_cached_engine_generates_the_references_32_tokens(self):
        # The inference engine (CPU op library, f32, KV cache) on the imported checkpoint: the same
        # first 32 greedy tokens as the float64 reference, and the prompt's logits within 2e-3 of
        # their largest magnitude.
        from nfn import _native
        start, end = self.tok.special_id("<|im_start|>"), self.tok.special_id("<|im_end|>")
        newline = self.tok.encode("\n")
        prompt = [start] + self.tok.encode(f"system\n{SYSTEM}") + [end] + newline + [start] + \
            self.tok.encode("user\nWrite a short story about a robot who learns to paint.") + [end] + newline + \
            [start] + self.tok.encode("assistant\n")
        want = self.reference.greedy(prompt, 32)
        engine = _native.InferenceEngine(weights_file=self.weights_file(), context=256)
        got = engine.generate(prompt, 32, temperature=0.0, stop_token=end)["tokens"]
        print(f"\n32 greedy tokens: {self.tok.decode(got)!r}")
        self.assertEqual(len(want), 32)
        self.assertEqual(got, want)
        engine.reset()
        logits = engine.forward(np.array(prompt, dtype=np.int32), all_logits=True)
        ref = self.reference.forward(np.array(prompt), {})[:, :logits.shape[1]]
        scale = np.abs(ref).max()
        self.assertLess(np.abs(logits - ref).max() / scale, 2e-3)

    def test_native_loss_matches_the_reference(self):
        from safetensors.numpy import load_file
        model = self.native_model()
        tensors = load_file(self.weights_file())
        layout = model.layout()
        self.assertEqual(sorted(tensors), sorted(name for name, *_ in layout))
        self.assertEqual([offset for *_, offset in layout], list(np.cumsum([0] + [r * c for _, r, c, _ in layout])[:-1]))
        flat = np.concatenate([tensors[name].reshape(-1) for name, *_ in layout])
        self.assertEqual(flat.size, model.num_parameters)
        model.set_parameters(flat.astype(np.float32))
        # A short chat prompt (the user turn alone) and the reference's answer after it.
        start = self.tok.special_id("<|im_start|>")
        user = self.prompt.index(start, 1)
        sequence = self.prompt[user:] + self.answer
        inputs, targets = np.array([sequence[:-1]], np.int32), np.array([sequence[1:]], np.int32)
        want = self.reference.token_losses(sequence[:-1], sequence[1:])
        got = model.forward_backward(inputs, targets, backward=False)
        print(f"\n{len(sequence) - 1} targets: summed loss native f32 {got:.6f}, reference f64 {want.sum():.6f}, "
              f"difference {got - want.sum():.2e}")
        self.assertLess(abs(got - want.sum()), LOSS_TOLERANCE)
        # Each answer token alone: the native model gives the reference's greedy choices the
        # reference's loss (a small one: they were its argmax).
        worst = 0.0
        for t in range(len(sequence) - 1 - len(self.answer), len(sequence) - 1):
            only = np.full_like(targets, -1)
            only[0, t] = targets[0, t]
            worst = max(worst, abs(model.forward_backward(inputs, only, backward=False) - want[t]))
        print(f"answer tokens' losses: largest difference {worst:.2e}")
        self.assertLess(worst, TOKEN_LOSS_TOLERANCE)
        # The control: q and k left in llama.cpp's row order are far off, so the comparison
        # above sees the import's un-permutation.
        g = self.result["geometry"]
        for name, rows, cols, offset in layout:
            heads = g["num_heads"] if name.endswith("q_proj.weight") else g["num_kv_heads"]
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                w = flat[offset:offset + rows * cols].reshape(heads, 2, rows // heads // 2, cols)
                flat[offset:offset + rows * cols] = w.swapaxes(1, 2).reshape(-1)
        model.set_parameters(flat.astype(np.float32))
        self.assertGreater(abs(model.forward_backward(inputs, targets, backward=False) - want.sum()), 1.0)

    def test_weights_file_says_what_it_holds(self):
        from nfn.weights import decoder_checkpoint
        with open(self.weights_file(), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            metadata = json.loads(f.read(n))["__metadata__"]
        g = self.result["geometry"]
        self.assertEqual(metadata, {"format": "nfn-decoder", "model_family": "llama",
                                    "geometry": decoder_checkpoint.geometry_text(g)})
        self.assertEqual((g["num_layers"], g["channels"], g["num_heads"], g["num_kv_heads"], g["head_dim"],
                          g["mlp_hidden"], g["vocab_size"], g["rope_theta"], g["tied_head"]),
                         (30, 576, 9, 3, 64, 1536, 49152, 100000, True))
        with open(os.path.join(self.result["directory"], "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["family"], manifest["model_family"], manifest["tokenizer"], manifest["eot_token"]),
                         ("decoder", "llama", "smollm2-135m-instruct", self.tok.special_id("<|im_end|>")))
        with open(os.path.join(self.result["directory"], "DONE_00000000")) as f:
            self.assertEqual(json.load(f), manifest)


if __name__ == "__main__":
    unittest.main()
