#!/usr/bin/env python3
"""The PyTorch CPU reference for nfn's CPU training throughput.

The same GPT (LayerNorm, tanh GELU, learned positions, tied head, biases) and the same step
as nfn's trainer: AdamW with decay/no-decay groups, global-norm clipping at 1.0, on random
tokens. Four modes: eager and torch.compile, fp32 and bf16 autocast. Prints one JSON object
with tokens/s per mode (median step time over the timed steps). A mode whose timed steps pass
--mode-seconds stops after 3 of them: bf16 autocast on a CPU without bf16 units runs ~25 s a
step, and its median needs no 10 of those.

    python3 tools/bench_train_torch_cpu.py --json

Needs torch; never part of nfn's runtime.
"""
import argparse
import json
import os
import statistics
import sys
import time

from bench_gpt_torch import adamw, build_model


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--mode-seconds", type=float, default=60.0,
                   help="stop timing a mode after this many seconds of timed steps (at least 3 steps)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--modes", default="eager_fp32,eager_bf16,compiled_fp32,compiled_bf16")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    return p.parse_args(argv)


def run_mode(torch, args, mode):
    torch.manual_seed(0)
    model = build_model(torch, args.layers, args.heads, args.channels, args.seq_len, args.vocab)
    opt = adamw(torch, model, 1e-3)
    step_fn = torch.compile(model) if mode.startswith("compiled") else model
    bf16 = mode.endswith("bf16")
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for i in range(args.warmup + args.steps):
        idx = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=gen)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            if len(times) >= 3 and sum(times) > args.mode_seconds:
                break
    step = statistics.median(times)
    return {"tokens_per_s": args.batch_size * args.seq_len / step, "median_step_s": step,
            "timed_steps": len(times), "final_loss": losses[-1]}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    torch.set_num_threads(args.threads)
    results = {}
    for mode in args.modes.split(","):
        try:
            results[mode] = run_mode(torch, args, mode)
        except Exception as e:  # a mode that cannot run here is reported, not fatal
            results[mode] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if not args.json:
            print(f"{mode:14s} {results[mode]}", file=sys.stderr)
    ok = {m: r["tokens_per_s"] for m, r in results.items() if "tokens_per_s" in r}
    best = max(ok, key=ok.get) if ok else None
    out = {"torch": torch.__version__, "threads": args.threads, "modes": results,
           "best_mode": best, "tokens_per_s": ok.get(best)}
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
