"""Test helpers written independently of nfn.infer: a numpy GPT-2 forward over Hugging Face
GPT-2 tensors (Conv1D weights stored (in, out)), random models, llm.c model files written
byte by byte, and a way to run the `nfn` CLI in a fresh interpreter."""
import math
import struct

import numpy as np

from nfn_probe import run_nfn  # noqa: F401  (re-exported for the infer tests)
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def llmc_shapes(T, Vp, L, C):
    return [(Vp, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def random_model(T=32, V=50257, L=2, NH=2, C=32, seed=0, scale=0.3):
    """{name: array} in llm.c shapes, wte padding rows zero, norms around 1."""
    Vp = (V + 127) // 128 * 128
    rng = np.random.default_rng(seed)
    p = {}
    for name, shape in zip(NAMES, llmc_shapes(T, Vp, L, C)):
        p[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
        if name in ("ln1w", "ln2w", "lnfw"):
            p[name] += 1.0
    p["wte"][V:] = 0.0
    geom = dict(max_seq_len=T, vocab_size=V, num_layers=L, num_heads=NH, channels=C, padded_vocab_size=Vp)
    return geom, p


def to_bf16_words(x):
    """Round to nearest even into bf16 words (upper halves of the f32 bits)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_llmc_by_hand(path, geom, params, version=3, magic=20240326):
    """256 little-endian int32 of header, then every tensor in order (f32, or bf16 words for v5)."""
    header = [magic, version, geom["max_seq_len"], geom["vocab_size"], geom["num_layers"], geom["num_heads"],
              geom["channels"], geom["padded_vocab_size"]] + [0] * 248
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name in NAMES:
            a = params[name]
            f.write(a.astype("<f4").tobytes() if version == 3 else to_bf16_words(a).astype("<u2").tobytes())


def widened(params):
    """The values a bf16 file holds, as f32."""
    return {k: (to_bf16_words(v).astype(np.uint32) << 16).view(np.float32) for k, v in params.items()}


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def hf_forward(t, ids, n_head):
    """Logits (T, V) of GPT-2 from HF-named tensors t (no "transformer." prefix), float64."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    T = len(ids)
    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    C = x.shape[1]
    hs = C // n_head
    layers = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))
    mask = np.tril(np.ones((T, T), dtype=bool))
    for l in range(layers):
        g = lambda n: t[f"h.{l}.{n}"]  # noqa: E731
        h = layer_norm(x, g("ln_1.weight"), g("ln_1.bias"))
        qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, n_head, hs).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hs)
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = layer_norm(x, g("ln_2.weight"), g("ln_2.bias"))
        h = gelu_tanh(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"))
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = layer_norm(x, t["ln_f.weight"], t["ln_f.bias"])
    return x @ t["wte.weight"].T


def llmc_to_hf_names(params, V):
    """The same model under HF names, mapped here by hand (independent of nfn.infer.hf)."""
    t = {"wte.weight": params["wte"][:V], "wpe.weight": params["wpe"],
         "ln_f.weight": params["lnfw"], "ln_f.bias": params["lnfb"]}
    for l in range(params["qkvw"].shape[0]):
        t[f"h.{l}.ln_1.weight"], t[f"h.{l}.ln_1.bias"] = params["ln1w"][l], params["ln1b"][l]
        t[f"h.{l}.attn.c_attn.weight"], t[f"h.{l}.attn.c_attn.bias"] = params["qkvw"][l].T, params["qkvb"][l]
        t[f"h.{l}.attn.c_proj.weight"], t[f"h.{l}.attn.c_proj.bias"] = params["attprojw"][l].T, params["attprojb"][l]
        t[f"h.{l}.ln_2.weight"], t[f"h.{l}.ln_2.bias"] = params["ln2w"][l], params["ln2b"][l]
        t[f"h.{l}.mlp.c_fc.weight"], t[f"h.{l}.mlp.c_fc.bias"] = params["fcw"][l].T, params["fcb"][l]
        t[f"h.{l}.mlp.c_proj.weight"], t[f"h.{l}.mlp.c_proj.bias"] = params["fcprojw"][l].T, params["fcprojb"][l]
    return t
