#!/usr/bin/env python3
"""Decode throughput with a KV cache: nfn's engine against a PyTorch CPU reference, in one run.

Both sides run the same random GPT (default: 4 layers, 256 channels, 4 heads, context 256,
vocab 8192) in f32 with the same thread count: the prompt is prefilled, then new tokens
are decoded greedily, one at a time, through a KV cache. Each side is timed `--repeats`
times and the medians are compared; the last JSON key, "ratio", is nfn / PyTorch decode
tokens per second (higher is better for nfn). The greedy tokens of the two sides are
compared too, as a check that they ran the same model.

    bazel build -c opt //py:nfn_native
    python3 tools/bench_infer.py --backend cpu --json

The PyTorch reference is written here (no model library) and is used only by this script.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu", choices=["cpu"], help="only the CPU is measured so far")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--native-dir", default=None,
                   help="directory holding the built nfn/_native.so (default: bazel-bin/py/nfn)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def import_native(native_dir):
    """nfn from the source tree, with the built _native module found beside it."""
    sys.path.insert(0, os.path.join(ROOT, "py"))
    import nfn
    nfn.__path__.append(native_dir or os.path.join(ROOT, "bazel-bin", "py", "nfn"))
    from nfn import _native
    return _native


def torch_decode(params, geom, prompt, new_tokens, threads):
    """(decode seconds, greedy tokens) of a plain PyTorch GPT-2 with a KV cache."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    T, V, L, NH, C = (geom[k] for k in ("max_seq_len", "vocab_size", "num_layers", "num_heads", "channels"))
    p = {k: torch.from_numpy(v) for k, v in params.items()}
    hs = C // NH
    k_cache = torch.zeros(L, NH, T, hs)
    v_cache = torch.zeros(L, NH, T, hs)

    def forward(ids, pos):
        n = len(ids)
        x = p["wte"][ids] + p["wpe"][pos:pos + n]
        for l in range(L):
            h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
            q, k, v = F.linear(h, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1)
            q, k, v = (t.view(n, NH, hs).transpose(0, 1) for t in (q, k, v))
            k_cache[l, :, pos:pos + n] = k
            v_cache[l, :, pos:pos + n] = v
            keys, values = k_cache[l, :, :pos + n], v_cache[l, :, :pos + n]
            if n == 1:
                y = F.scaled_dot_product_attention(q, keys, values)
            else:  # prefill from an empty cache: causal within the block
                y = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
            x = x + F.linear(y.transpose(0, 1).reshape(n, C), p["attprojw"][l], p["attprojb"][l])
            h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
            h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
            x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
        x = F.layer_norm(x[-1:], (C,), p["lnfw"], p["lnfb"], eps=1e-5)
        return F.linear(x, p["wte"][:V])[0]

    with torch.inference_mode():
        logits = forward(torch.tensor(prompt), 0)
        out = [int(logits.argmax())]
        t0 = time.perf_counter()
        for i in range(new_tokens - 1):
            logits = forward(torch.tensor(out[-1:]), len(prompt) + i)
            out.append(int(logits.argmax()))
        return time.perf_counter() - t0, out


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    _native = import_native(args.native_dir)
    if args.prompt_tokens + args.new_tokens > args.context:
        sys.exit("bench_infer: --prompt-tokens + --new-tokens must fit --context")
    V, C, L = args.vocab, args.channels, args.layers
    Vp = (V + 127) // 128 * 128
    geom = dict(max_seq_len=args.context, vocab_size=V, num_layers=L, num_heads=args.heads, channels=C,
                padded_vocab_size=Vp)
    flat = _native.gpt_random_parameters(args.context, V, L, args.heads, C, 1)
    params, offset = {}, 0
    for name, shape, _ in _native.gpt_param_layout(args.context, V, L, args.heads, C, Vp):
        n = int(np.prod(shape))
        params[name] = np.asarray(flat[offset:offset + n]).reshape(shape)
        offset += n
    prompt = list(np.random.default_rng(0).integers(0, V, size=args.prompt_tokens))
    prompt = [int(t) for t in prompt]

    engine = _native.InferenceEngine(flat, args.context, V, L, args.heads, C, Vp, threads=args.threads)
    engine.generate(prompt, 4, temperature=0)  # warm-up: primitive creation, first touches
    nfn_runs, nfn_tokens = [], None
    for _ in range(args.repeats):
        r = engine.generate(prompt, args.new_tokens, temperature=0)
        nfn_runs.append((len(r["tokens"]) - 1) / r["decode_seconds"])
        nfn_tokens = r["tokens"]
    torch_decode(params, geom, prompt, 4, args.threads)  # warm-up
    torch_runs, torch_tokens = [], None
    for _ in range(args.repeats):
        seconds, torch_tokens = torch_decode(params, geom, prompt, args.new_tokens, args.threads)
        torch_runs.append((args.new_tokens - 1) / seconds)
    nfn_tps, torch_tps = statistics.median(nfn_runs), statistics.median(torch_runs)
    same = sum(a == b for a, b in zip(nfn_tokens, torch_tokens))
    result = {
        "backend": args.backend, "threads": args.threads,
        "model": {"layers": L, "heads": args.heads, "channels": C, "context": args.context, "vocab": V,
                  "parameters": int(flat.size)},
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "repeats": args.repeats,
        "greedy_tokens_matching": f"{same}/{len(nfn_tokens)}",
        "nfn_decode_tokens_per_second": round(nfn_tps, 1),
        "nfn_decode_runs": [round(x, 1) for x in nfn_runs],
        "torch_decode_tokens_per_second": round(torch_tps, 1),
        "torch_decode_runs": [round(x, 1) for x in torch_runs],
        "ratio": round(nfn_tps / torch_tps, 3) if torch_tps > 0 else math.nan,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"decode tokens/s  nfn {nfn_tps:.1f}   pytorch {torch_tps:.1f}   "
              f"(greedy tokens matching {result['greedy_tokens_matching']})")
        print(f"ratio {result['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
