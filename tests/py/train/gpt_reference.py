"""An independent PyTorch GPT-2 (LayerNorm, tanh GELU, learned positions, tied head) that
reads nfn's flat parameter vector in llm.c checkpoint order. Test reference only."""
import math

import numpy as np
import torch
import torch.nn.functional as F

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def shapes(T, Vp, L, C):
    return [(Vp, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def split(flat, T, Vp, L, C):
    """Flat parameter vector -> {name: tensor view} in checkpoint order."""
    out, offset = {}, 0
    for name, shape in zip(NAMES, shapes(T, Vp, L, C)):
        n = int(np.prod(shape))
        out[name] = flat[offset:offset + n].view(shape)
        offset += n
    assert offset == flat.numel(), "layout does not cover the vector"
    return out


def forward(p, idx, targets, V, NH):
    """Mean cross-entropy of the GPT-2 forward; p from split(), idx/targets (B, T) long."""
    B, T = idx.shape
    C = p["wte"].shape[1]
    L = p["qkvw"].shape[0]
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"][:V].T
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
