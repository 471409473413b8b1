#!/usr/bin/env python3
"""The PyTorch reference for GPT-2 training throughput on a CUDA GPU.

GPT-2 small (124M: 12 layers, 12 heads, 768 channels, vocab 50304 padded) at sequence length
1024, bf16 autocast, torch.compile, fused AdamW and flash SDPA (causal), trained on random
tokens: the same model and step nfn's trainer runs, written the way a careful PyTorch user
would. Prints one JSON object: tokens/s, step time, MFU against --peak-tflops.

    python3 tools/bench_train_torch_cuda.py --steps 30 --batch-size 16 --json

Needs torch with CUDA; never part of nfn's runtime.
"""
import argparse
import json
import math
import sys

from bench_gpt_torch import adamw, build_model


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=16, help="micro-batch rows B")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per row T")
    p.add_argument("--steps", type=int, default=30, help="timed optimizer steps")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches a step, their gradients summed (GPT-2's 524,288-token batch: 32 at B=16)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--channels", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304, help="padded vocabulary")
    p.add_argument("--peak-tflops", type=float, default=989.4,
                   help="dense bf16 peak of the GPU for MFU (H100/H200 SXM: 989.4)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 1
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    model = build_model(torch, args.layers, args.heads, args.channels, args.seq_len, args.vocab).to(dev)
    params = sum(p.numel() for p in model.parameters())
    step_model = model if args.no_compile else torch.compile(model)
    opt = adamw(torch, model, 6e-4, fused=True)
    B, T = args.batch_size, args.seq_len
    # Several batches of random tokens, rotated, so no step reads the same data twice in a row.
    batches = [torch.randint(0, 50257, (B, T + 1), device=dev) for _ in range(4)]

    def step(i):
        for j in range(args.accum):
            data = batches[(i * args.accum + j) % len(batches)]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(data[:, :-1], data[:, 1:])
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(args.steps):
        loss = step(i)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    tokens_per_s = B * T * args.accum * args.steps / seconds
    # FLOPs per token: 6 per parameter (forward + backward; every parameter, the padded
    # vocabulary's and the positions', as llm.c and nfn's trainer count them) plus attention's
    # 6 * L * T * C (the causal half; nanoGPT's PaLM formula counts 12 * L * T * C).
    flops_per_token = 6 * params + 6 * args.layers * T * args.channels
    mfu = tokens_per_s * flops_per_token / (args.peak_tflops * 1e12)
    result = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "parameters": params,
        "batch_size": B,
        "seq_len": T,
        "accum": args.accum,
        "steps": args.steps,
        "step_ms": seconds / args.steps * 1e3,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": flops_per_token,
        "mfu": mfu,
        "final_loss": float(loss.item()),
        "compiled": not args.no_compile,
    }
    if not math.isfinite(result["final_loss"]):
        result["error"] = "loss is not finite"
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
