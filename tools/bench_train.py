#!/usr/bin/env python3
"""Training throughput of nfn against the PyTorch reference on the same GPU, in one run.

Trains GPT-2 124M (seq 1024, bf16) with nfn's trainer on random-token shards, then with
tools/bench_train_torch_cuda.py, and prints tokens/s and MFU for both and their ratio last
(JSON key "ratio" = nfn / pytorch). Both MFUs count FLOPs a token as the trainer's report
does ("flops_per_token"), since both sides train the same geometry.

    python3 tools/bench_train.py --backend cuda --json \\
        --trainer .device/bin/nfn_gpt_native_train --tile-ops-lib .device/lib/libnfn_native_train_tile_ops.so

--family nanochat (CPU only) trains nanochat's model with nfn_nanochat_native_train against
tools/bench_nanochat_torch.py's, and prints the host's CPU model and features with them.

Standard library only; the reference needs torch.
"""
import argparse
import array
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default="gpt", choices=["gpt", "nanochat"],
                   help="gpt (default); nanochat: cpu only, 4 layers, 256 channels, 2 heads of 128, windows "
                        "SSSL, seq 256, vocab 1024, against tools/bench_nanochat_torch.py in three modes")
    p.add_argument("--backend", default="cuda", choices=["cpu", "cuda"],
                   help="cuda: GPT-2 124M against tools/bench_train_torch_cuda.py; cpu: a small GPT "
                        "(4 layers, 256 channels, seq 256, vocab 8192) against "
                        "tools/bench_train_torch_cpu.py in four modes")
    p.add_argument("--trainer", default=None,
                   help="nfn_gpt_native_train binary, nfn_nanochat_native_train with --family nanochat "
                        "(default: bazel-bin/cc/bin, else .device/bin)")
    p.add_argument("--tile-ops-lib", default="", help="op library for the trainer (default: its own search)")
    p.add_argument("--batch-size", type=int, default=None, help="cuda: micro-batch rows (default 16)")
    p.add_argument("--seq-len", type=int, default=None, help="cuda: tokens a row (default 1024)")
    p.add_argument("--accum", type=int, default=1,
                   help="cuda: micro-batches an optimizer step on both sides (32 makes GPT-2's "
                        "524,288-token batch at B=16; 1: an optimizer step every micro-batch)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: 30 cuda, 10 cpu)")
    p.add_argument("--peak-tflops", type=float, default=989.4,
                   help="dense bf16 peak for MFU (H100/H200 SXM: 989.4, as the trainer's cc/train/mfu.h)")
    p.add_argument("--timeout", type=int, default=None,
                   help="seconds each run may take (one that takes longer is stopped and reported as an error): cuda: "
                        "nfn per mode, the reference (default 130); cpu: each trainer run, the reference's start "
                        "(every mode built and warmed up) and each of its answers (one mode's steps of a round) "
                        "(default 600)")
    p.add_argument("--modes", default="cudnn,cudnn+graphs",
                   help="cuda: nfn runs, comma-separated, each the trainer's --attention path (cudnn, "
                        "flash_mma, thunderkittens, flash) with +graphs (--graphs on), +tune "
                        "(--gemm-tune on), +nondet (--deterministic off), +overlap (--overlap on) and +pdl "
                        "(--pdl on) "
                        "as wanted, else off; "
                        "the fastest that finishes is nfn's number (default: cudnn,cudnn+graphs)")
    p.add_argument("--rounds", type=int, default=7,
                   help="cpu: rounds of nfn and PyTorch back to back; the ratio is the median of the rounds' ratios")
    p.add_argument("--skip-torch", action="store_true", help="measure nfn only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def write_shard_tokens(path, tokens):
    """An llm.c token shard: 256 int32 header, then the tokens as uint16."""
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(tokens)
    with open(path, "wb") as f:
        header.tofile(f)
        array.array("H", tokens).tofile(f)


def write_shard(path, ntok, rng):
    write_shard_tokens(path, [rng.randrange(50257) for _ in range(ntok)])


def successor_tokens(n, succ, rng, noise=0.1):
    """A learnable stream of n tokens (tools/device_check.sh's tiny training runs): each follows
    the last by the fixed table succ, except with probability noise, when it is uniform."""
    t, out = 0, []
    for _ in range(n):
        t = succ[t] if rng.random() > noise else rng.randrange(len(succ))
        out.append(t)
    return out


# Untimed steps before each side's timed ones (passed to bench_train_torch_cuda.py's --warmup).
CUDA_WARMUP_STEPS = 5


def timed_steps(report, warmup):
    """The trainer's per-step wall times (report "step_seconds") after `warmup` steps."""
    times = report.get("step_seconds") or []
    if len(times) <= warmup:
        raise ValueError(f"report has {len(times)} step times, fewer than {warmup} warm-up steps + 1")
    return times[warmup:]


def device_steps(times):
    """The step times that hold exactly one step of device work each. On CUDA the trainer reads
    a step's results after issuing the next, so a step's time runs from its issue to the next
    one's, and from the first timed step's issue the device still has the step before it to
    run; the last step's time (issue to its own read) holds two steps' work. Without it the
    window from the first timed issue to the last issue holds as many steps as it counts (with
    it, one more: the rate came out steps/(steps+1) of the true one)."""
    if len(times) < 2:
        raise ValueError(f"{len(times)} timed step(s): at least 2 are needed")
    return times[:-1]


def run_nfn_modes(args, workdir):
    """nfn once per mode; the fastest finished run, with every mode's under "modes"."""
    modes = {}
    for mode in args.modes.split(","):
        modes[mode] = run_nfn(args, os.path.join(workdir, mode), mode)
        progress(f"nfn {mode}", modes[mode])
    return nfn_summary(modes)


def nfn_summary(modes):
    """The fastest finished mode's result, with every mode's under "modes" (tools/device_rows.py
    puts a stopped benchmark's together the same way)."""
    done = {k: v for k, v in modes.items() if v.get("tokens_per_s")}
    if not done:
        return {"error": "; ".join(f"{k}: {v.get('error')}" for k, v in modes.items()), "modes": modes}
    best = max(done, key=lambda k: done[k]["tokens_per_s"])
    return dict(done[best], mode=best, modes=modes)


def progress(name, result):
    """One stderr line a finished run, "bench_train: NAME JSON", so that a benchmark stopped from
    outside (tools/device_check.sh gives it a time limit) still leaves what it measured."""
    print(f"bench_train: {name} {json.dumps(result)}", file=sys.stderr, flush=True)


def run_nfn(args, workdir, mode):
    attention, *extras = mode.split("+")
    if set(extras) - {"graphs", "tune", "nondet", "overlap", "pdl"}:
        return {"error": f"mode {mode}: expected ATTENTION[+graphs][+tune][+nondet][+overlap][+pdl]"}
    if not os.path.exists(args.trainer):
        return {"error": f"{args.trainer} not found (build it, then tools/prepare_device.sh)"}
    rng = random.Random(0)
    step_tokens = args.batch_size * args.seq_len * args.accum
    ntok = step_tokens * (CUDA_WARMUP_STEPS + args.steps + 2) + 1
    data = os.path.join(workdir, "data")
    os.makedirs(data, exist_ok=True)
    write_shard(os.path.join(data, "bench_train_000000.bin"), ntok, rng)
    write_shard(os.path.join(data, "bench_val_000000.bin"), args.batch_size * args.seq_len + 1, rng)
    cmd = [args.trainer, "--template-name", "gpt2-124m", "--backend", args.backend,
           "--dtype", "bf16", "--train-data", data, "--train-seq-len", str(args.seq_len),
           "--batch-size", str(args.batch_size),
           "--train-batch-tokens", str(step_tokens),
           "--max-steps", str(CUDA_WARMUP_STEPS + args.steps), "--eval-every-steps", str(CUDA_WARMUP_STEPS + args.steps),
           "--eval-batches", "1", "--attention", attention,
           "--graphs", "on" if "graphs" in extras else "off", "--gemm-tune", "on" if "tune" in extras else "off",
           "--deterministic", "off" if "nondet" in extras else "on", "--overlap", "on" if "overlap" in extras else "off",
           "--pdl", "on" if "pdl" in extras else "off",
           "--output-dir", os.path.join(workdir, "out"), "--json"]
    if args.tile_ops_lib:
        cmd += ["--tile-ops-lib", args.tile_ops_lib]
    span = {"t0": time.time()}  # the run's wall-clock span, for the clock samples taken meanwhile
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"trainer ran past {args.timeout} s"}
    span["t1"] = time.time()
    if proc.returncode != 0:
        return {"error": f"trainer exited {proc.returncode}: {proc.stderr.strip()[-400:]}"}
    report = json.loads(proc.stdout)
    # As the reference: the timed steps' total device time after the warm-up ones.
    try:
        times = device_steps(timed_steps(report, CUDA_WARMUP_STEPS))
    except ValueError as e:
        return {"error": str(e)}
    tps = step_tokens * len(times) / sum(times)
    # Host time to issue a step against the step: near 1, launches bound the step (graphs pay).
    enqueue = (report.get("enqueue_seconds") or [])[CUDA_WARMUP_STEPS:]
    flops = report.get("flops_per_token")  # the trainer's count (cc/train/mfu.h)
    return {"impl": "nfn", **span, "tokens_per_s": tps, "step_ms": 1e3 * sum(times) / len(times),
            "enqueue_ms": 1e3 * statistics.median(enqueue) if enqueue else None,
            "flops_per_token": flops, "mfu": mfu(tps, flops, args.peak_tflops),
            "final_loss": report.get("final_train_loss"),
            "op_library": report.get("op_library")}


def mfu(tokens_per_s, flops_per_token, peak_tflops):
    return tokens_per_s * flops_per_token / (peak_tflops * 1e12) if flops_per_token else None


def count_as_nfn(ref, nfn, peak_tflops):
    """The reference's MFU from nfn's FLOPs a token: both train the same geometry, so one count
    (the trainer's) serves both rows; where nfn gave none, the reference's own stays."""
    flops = nfn.get("flops_per_token")
    if flops and ref.get("tokens_per_s"):
        ref.update(flops_per_token=flops, mfu=mfu(ref["tokens_per_s"], flops, peak_tflops))
    return ref


def run_torch(args):
    cmd = [sys.executable, os.path.join(HERE, "bench_train_torch_cuda.py"), "--json",
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--accum", str(args.accum),
           "--warmup", str(CUDA_WARMUP_STEPS), "--steps", str(args.steps), "--peak-tflops", str(args.peak_tflops)]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"reference ran past {args.timeout} s"}
    if proc.returncode != 0:
        why = (proc.stderr.strip() or proc.stdout.strip())[-400:]
        return {"error": f"reference exited {proc.returncode}: {why}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), t0=t0, t1=time.time())


def default_trainer(family="gpt"):
    name = f"nfn_{family}_native_train"
    for path in (f"bazel-bin/cc/bin/{name}", f".device/bin/{name}"):
        if os.path.exists(path):
            return path
    return f".device/bin/{name}"


CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")  # those nfn's CPU GEMMs choose by


def cpu_info(path="/proc/cpuinfo"):
    """The host's CPU model and which of CPU_FEATURES it has (as `nfn kernels doctor` reports)."""
    fields = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for key, _, value in (line.partition(":") for line in f):
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"), "features": [f for f in CPU_FEATURES if f in flags]}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.trainer = os.path.abspath(args.trainer or default_trainer(args.family))
    if args.family != "gpt" and args.backend != "cpu":
        print(f"bench_train: --family {args.family}: --backend cpu only", file=sys.stderr)
        return 2
    if args.accum < 1:
        print(f"bench_train: --accum {args.accum} must be at least 1", file=sys.stderr)
        return 2
    if args.timeout is not None and args.timeout < 1:
        print(f"bench_train: --timeout {args.timeout} must be at least 1 second", file=sys.stderr)
        return 2
    if args.steps is None:
        args.steps = 10 if args.backend == "cpu" else 30
    if args.backend == "cpu":
        # The CPU benchmark's geometry is fixed (bench_train_cpu.py).
        given = [f for f, v in (("--batch-size", args.batch_size), ("--seq-len", args.seq_len),
                                ("--accum", args.accum if args.accum != 1 else None))
                 if v is not None]
        if given:
            print(f"bench_train: {', '.join(given)}: cuda only (the cpu benchmark's geometry is fixed)", file=sys.stderr)
            return 2
        args.timeout = 600 if args.timeout is None else args.timeout
        import bench_train_cpu
        with tempfile.TemporaryDirectory(prefix="nfn-bench-") as workdir:
            result = bench_train_cpu.run(args, workdir)
        if args.family != "gpt":
            result = dict(result, family=args.family, cpu=cpu_info())
        if not args.json:
            if "cpu" in result:
                print(f"cpu {result['cpu']['model']} ({' '.join(result['cpu']['features'])}), "
                      f"{result['threads']} threads")
            for mode, r in result["nfn"]["modes"].items():
                print(f"nfn {mode:18s} {r.get('tokens_per_s', 0):10.0f} tok/s  {r.get('error', '')}")
            for mode, r in result["pytorch"].get("modes", {}).items():
                print(f"pytorch {mode:14s} {r.get('tokens_per_s', 0):10.0f} tok/s  {r.get('error', '')}")
            for i, r in enumerate(result["rounds"], 1):
                print(f"round {i}: nfn {r['nfn'] or 0:.0f} pytorch {r['pytorch'] or 0:.0f} tok/s"
                      + (f" ratio {r['ratio']:.3f}" if r["ratio"] else ""))
            print(f"ratio {result['ratio']:.3f}" if result["ratio"] else "ratio n/a")
        else:
            print(json.dumps(result))
        return 0 if result["ratio"] or (args.skip_torch and result["nfn"]["tokens_per_s"]) else 1
    args.batch_size = 16 if args.batch_size is None else args.batch_size
    args.seq_len = 1024 if args.seq_len is None else args.seq_len
    args.timeout = 130 if args.timeout is None else args.timeout
    with tempfile.TemporaryDirectory(prefix="nfn-bench-") as workdir:
        nfn = run_nfn_modes(args, workdir)
    ref = {"skipped": True} if args.skip_torch else count_as_nfn(run_torch(args), nfn, args.peak_tflops)
    progress("pytorch", ref)
    ratio = None
    if nfn.get("tokens_per_s") and ref.get("tokens_per_s") and "error" not in ref:  # a NaN loss is no rate
        ratio = nfn["tokens_per_s"] / ref["tokens_per_s"]
    result = {"model": "gpt2-124m", "batch_size": args.batch_size, "seq_len": args.seq_len, "accum": args.accum,
              "steps": args.steps, "nfn": nfn, "pytorch": ref, "ratio": ratio}
    if args.json:
        print(json.dumps(result))
    else:
        for name, r in (("nfn", nfn), ("pytorch", ref)):
            if "tokens_per_s" in r and "error" not in r:
                what = f"  mode {r['mode']}" if "mode" in r else ""
                use = f"MFU {100 * r['mfu']:5.1f}%" if r.get("mfu") is not None else "MFU n/a"
                print(f"{name:8s} {r['tokens_per_s']:12.0f} tok/s  {use}{what}")
            else:
                print(f"{name:8s} {r.get('error', 'skipped')}")
        print(f"ratio    {ratio:.3f}" if ratio else "ratio    n/a")
    return 0 if ratio or (args.skip_torch and nfn.get("tokens_per_s")) else 1


if __name__ == "__main__":
    sys.exit(main())
