#!/usr/bin/env python3
"""The PyTorch CPU reference for nfn's CPU training throughput.

--family gpt (the default): the same GPT (LayerNorm, tanh GELU, learned positions, tied head, biases) and the same step
as nfn's trainer: AdamW with decay/no-decay groups, global-norm clipping at 1.0, on random
tokens. Four modes: eager and torch.compile, fp32 and bf16 autocast. Prints one JSON object
with tokens/s per mode (median step time over the timed steps). --family nanochat: nanochat
(tools/bench_nanochat_torch.py) with its MuonAdamW, no clipping, in three modes (no compiled
bf16). A mode whose timed steps pass
--mode-seconds stops after 3 of them: bf16 autocast on a CPU without bf16 units runs ~25 s a
step, and its median needs no 10 of those.

    python3 tools/bench_train_torch_cpu.py --json
    python3 tools/bench_train_torch_cpu.py --serve   # warm once, then "MODE STEPS" per stdin line

Needs torch; never part of nfn's runtime.
"""
import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import time

MODES = ("eager_fp32", "eager_bf16", "compiled_fp32", "compiled_bf16")
FAMILY_MODES = {"gpt": MODES, "nanochat": MODES[:3]}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default="gpt", choices=sorted(FAMILY_MODES))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None, help="nanochat: key/value heads (default: --heads)")
    p.add_argument("--window-pattern", default="SSSL", help="nanochat: S short, L long, tiled over the layers")
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--mode-seconds", type=float, default=60.0,
                   help="stop timing a mode after this many seconds of timed steps (at least 3 steps)")
    p.add_argument("--start-seconds", type=float, default=None,
                   help="give up a mode whose build and warm-up (compilation) take longer, reported as its error")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--modes", default=None, help="comma-separated, of " + ", ".join(MODES) + " (default: the family's)")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    p.add_argument("--serve", action="store_true",
                   help="warm every mode once, then run 'MODE STEPS' requests from stdin (one JSON line each)")
    args = p.parse_args(argv)
    known = FAMILY_MODES[args.family]
    args.modes = args.modes or ",".join(known)
    unknown = [m for m in args.modes.split(",") if m not in known]
    if unknown:
        p.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return args


class Mode:
    """One mode's model, optimizer and token stream; steps(n) trains n steps and returns
    their wall times."""

    def __init__(self, torch, args, mode):
        torch.manual_seed(0)
        self.torch, self.args, self.mode = torch, args, mode
        self.bf16 = mode.endswith("bf16")
        self.clip = args.family == "gpt"  # nanochat trains without clipping
        if args.family == "nanochat":
            import bench_nanochat_torch as nc
            self.model = nc.build_model(torch, args.layers, args.heads, args.kv_heads or args.heads, args.channels,
                                        args.seq_len, args.vocab, args.window_pattern)
            self.opt = nc.MuonAdamW(torch, self.model, torch.bfloat16 if self.bf16 else torch.float32,
                                    channels=args.channels)
        else:
            from bench_gpt_torch import adamw, build_model
            self.model = build_model(torch, args.layers, args.heads, args.channels, args.seq_len, args.vocab)
            self.opt = adamw(torch, self.model, 1e-3)
        self.step_fn = torch.compile(self.model) if mode.startswith("compiled") else self.model
        self.gen = torch.Generator().manual_seed(1)
        self.loss = None

    def steps(self, n, seconds=float("inf")):
        """n steps, or fewer once 3 have passed `seconds` in all."""
        torch, a = self.torch, self.args
        times = []
        for _ in range(n):
            idx = torch.randint(0, a.vocab, (a.batch_size, a.seq_len + 1), generator=self.gen)
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                loss = self.step_fn(idx[:, :-1], idx[:, 1:])
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.loss = loss.item()
            times.append(time.perf_counter() - t0)
            if len(times) >= 3 and sum(times) > seconds:
                break
        return times


def rate(args, mode, times):
    step = statistics.median(times)
    return {"tokens_per_s": args.batch_size * args.seq_len / step, "median_step_s": step,
            "timed_steps": len(times), "final_loss": mode.loss}


def start_modes(torch, args, names):
    """Each mode built and warmed up (compiled); a mode that cannot run here is reported."""
    modes, errors = {}, {}
    for name in names:
        try:
            with time_limit(args.start_seconds, f"{name}: build and warm-up ran past {args.start_seconds} s"):
                modes[name] = Mode(torch, args, name)
                modes[name].steps(args.warmup)
        except Exception as e:  # reported, not fatal
            modes.pop(name, None)
            errors[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return modes, errors


@contextlib.contextmanager
def time_limit(seconds, message):
    """TimeoutError(message) in the block once `seconds` pass (None: no limit): a compilation
    that would take the reference's whole time leaves its mode skipped, the others measured."""
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(message)

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def serve(torch, args, modes, errors):
    """--serve: after warming every mode, one JSON line {"ready": ..., "errors": ...}, then
    for each stdin line "MODE STEPS" one JSON line with that mode's rate over STEPS more steps.
    Compilation happens once, so a caller can alternate short runs with its own."""
    print(json.dumps({"ready": sorted(modes), "errors": errors, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        name, n = line.split()
        if name not in modes:
            print(json.dumps({"mode": name, "error": f"mode {name} is not running"}), flush=True)
            continue
        times = modes[name].steps(int(n), args.mode_seconds)
        print(json.dumps(dict(rate(args, modes[name], times), mode=name)), flush=True)
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    torch.set_num_threads(args.threads)
    names = args.modes.split(",")
    if args.serve:
        return serve(torch, args, *start_modes(torch, args, names))
    results = {}
    for name in names:  # one mode at a time, so an idle compiled model never holds memory
        modes, errors = start_modes(torch, args, [name])
        try:
            results[name] = errors.get(name) or rate(args, modes[name], modes[name].steps(args.steps, args.mode_seconds))
        except Exception as e:  # reported, not fatal
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if not args.json:
            print(f"{name:14s} {results[name]}", file=sys.stderr)
    ok = {m: r["tokens_per_s"] for m, r in results.items() if "tokens_per_s" in r}
    best = max(ok, key=ok.get) if ok else None
    out = {"torch": torch.__version__, "threads": args.threads, "modes": results,
           "best_mode": best, "tokens_per_s": ok.get(best)}
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
