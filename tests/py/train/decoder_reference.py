"""Float64 PyTorch references of the modern decoder's two families, written from their
definitions (nanochat's gpt.py, Hugging Face's LlamaForCausalLM) and independent of nfn:
a flat parameter vector, split by the native layout's names and shapes, to logits and a summed
loss."""
import math

import numpy as np

import torch
import torch.nn.functional as F

f64 = torch.float64


def split(flat, layout):
    """{name: tensor view} from a flat vector and [(name, rows, cols, offset)]."""
    out = {}
    for name, rows, cols, offset in layout:
        t = flat[offset:offset + rows * cols]
        out[name] = t.view(rows, cols) if rows > 1 else t.view(cols)
    return out


def rms(x, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)


def rotary(x, theta, nanochat):
    """x (B, T, H, D): nanochat rotates each half-pair by -angle, Hugging Face by +angle."""
    T, D = x.shape[1], x.shape[3]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=f64) / D)
    ang = torch.outer(torch.arange(T, dtype=f64), inv)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    if nanochat:
        return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], -1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(q, k, v, window):
    """q (B,T,NH,D), k and v (B,T,NKV,D); causal, key j seen from query i when
    i - window <= j <= i (window 0: all j <= i)."""
    B, T, NH, D = q.shape
    rep = NH // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    keep = (j <= i) & ((j >= i - window) if window > 0 else torch.ones_like(j, dtype=torch.bool))
    scores = scores.masked_fill(~keep, float("-inf"))
    y = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v)
    return y.reshape(B, T, NH * D)


def loss_sum(logits, targets, vocab):
    logits = logits[..., :vocab]
    return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=-1, reduction="sum")


def windows(seq_len, layers, pattern):
    quarter = (seq_len + 3) // 4
    if seq_len >= 512:
        quarter = (quarter + 127) // 128 * 128
    w = [quarter if pattern[i % len(pattern)] == "S" else 0 for i in range(layers)]
    w[-1] = 0
    return w


def random_weights(layout, rng):
    """Every tensor non-zero (so every gradient flows), the scalars near their usual values."""
    flat = np.zeros(layout[-1][3] + layout[-1][1] * layout[-1][2], dtype=np.float32)
    for name, rows, cols, offset in layout:
        n = rows * cols
        w = rng.standard_normal(n).astype(np.float32)
        if name in ("resid_lambdas", "x0_lambdas", "smear_lambda", "backout_lambda") or name.endswith("norm.weight") \
                or name.endswith("layernorm.weight"):
            w = 0.6 + 0.2 * w
        elif name.endswith("gate.weight"):
            w = 0.5 * w
        else:
            w = w / np.sqrt(cols)
        flat[offset:offset + n] = w
    return flat


def nanochat_loss(p, idx, targets, cfg):
    """nanochat's GPT.forward: the summed cross-entropy of the soft-capped logits."""
    return loss_sum(nanochat_logits(p, idx, cfg), targets, cfg["vocab_size"])


def nanochat_logits(p, idx, cfg):
    """nanochat's soft-capped logits (B, T, padded vocabulary)."""
    B, T = idx.shape
    L, NH, NKV, HD, eps = cfg["num_layers"], cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"], 1e-5
    x = rms(p["transformer.wte.weight"][idx], eps)
    gate = p["smear_lambda"] * torch.sigmoid(x[:, 1:, :24] @ p["smear_gate.weight"].reshape(1, 24).T)
    x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], 1)
    x0, x_mid = x, None
    win = windows(cfg["max_seq_len"], L, cfg["window_pattern"])
    for i in range(L):
        pre = f"transformer.h.{i}."
        x = p["resid_lambdas"][i] * x + p["x0_lambdas"][i] * x0
        h = rms(x, eps)
        q = (h @ p[pre + "attn.c_q.weight"].T).view(B, T, NH, HD)
        k = (h @ p[pre + "attn.c_k.weight"].T).view(B, T, NKV, HD)
        v = (h @ p[pre + "attn.c_v.weight"].T).view(B, T, NKV, HD)
        if f"value_embeds.{i}.weight" in p:
            ve = p[f"value_embeds.{i}.weight"][idx].view(B, T, NKV, HD)
            g = 3 * torch.sigmoid(h[..., :12] @ p[pre + "attn.ve_gate.weight"].reshape(NKV, 12).T)
            v = v + g.unsqueeze(-1) * ve
        q, k = rotary(q, 100000.0, True), rotary(k, 100000.0, True)
        q, k = rms(q, eps) * 1.2, rms(k, eps) * 1.2
        x = x + attention(q, k, v, win[i]) @ p[pre + "attn.c_proj.weight"].T
        x = x + torch.relu(rms(x, eps) @ p[pre + "mlp.c_fc.weight"].T).square() @ p[pre + "mlp.c_proj.weight"].T
        if i == L // 2:
            x_mid = x
    x = rms(x - p["backout_lambda"] * x_mid, eps)
    logits = x @ p["lm_head.weight"].T
    return 15 * torch.tanh(logits / 15)


def llama_loss(p, idx, targets, cfg):
    """LlamaForCausalLM's forward (no biases, SwiGLU, weighted RMSNorm): the summed loss."""
    return loss_sum(llama_logits(p, idx, cfg), targets, cfg["vocab_size"])


def llama_logits(p, idx, cfg):
    """LlamaForCausalLM's logits (B, T, padded vocabulary)."""
    B, T = idx.shape
    L, NH, NKV, HD = cfg["num_layers"], cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    x = p["model.embed_tokens.weight"][idx]
    for i in range(L):
        pre = f"model.layers.{i}."
        h = rms(x, eps) * p[pre + "input_layernorm.weight"]
        q = rotary((h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, NH, HD), theta, False)
        k = rotary((h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, NKV, HD), theta, False)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, NKV, HD)
        x = x + attention(q, k, v, 0) @ p[pre + "self_attn.o_proj.weight"].T
        h = rms(x, eps) * p[pre + "post_attention_layernorm.weight"]
        mlp = F.silu(h @ p[pre + "mlp.gate_proj.weight"].T) * (h @ p[pre + "mlp.up_proj.weight"].T)
        x = x + mlp @ p[pre + "mlp.down_proj.weight"].T
    x = rms(x, eps) * p["model.norm.weight"]
    head = p["model.embed_tokens.weight"] if cfg["tied_head"] else p["lm_head.weight"]
    return x @ head.T
