"""The CPU half of tools/bench_train.py: nfn's trainer (f32 and bf16 GEMMs) against the
PyTorch CPU reference (tools/bench_train_torch_cpu.py) on the same small GPT, same threads.

Both sides are timed the same way: the median of the timed steps after 3 untimed ones
(nfn's per-step wall times come from its report's "step_seconds").
"""
import json
import os
import random
import statistics
import subprocess
import sys

from bench_train import timed_steps, write_shard_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
GEOMETRY = {"layers": 4, "heads": 4, "channels": 256, "seq_len": 256, "batch_size": 8, "vocab": 8192}
WARMUP_STEPS = 3  # bench_train_torch_cpu.py's --warmup default


def nfn_rate(trainer, workdir, matmul, threads, steps):
    g = GEOMETRY
    data = os.path.join(workdir, "data")
    if not os.path.isdir(data):
        os.makedirs(data)
        rng = random.Random(0)
        ntok = g["batch_size"] * g["seq_len"] * (WARMUP_STEPS + steps + 2) + 1
        write_shard_tokens(os.path.join(data, "bench_train_000000.bin"),
                           [rng.randrange(g["vocab"]) for _ in range(ntok)])
    cmd = [trainer, "--train-data", data, "--vocab-size", str(g["vocab"]), "--num-layers", str(g["layers"]),
           "--num-heads", str(g["heads"]), "--model-dim", str(g["channels"]), "--train-seq-len", str(g["seq_len"]),
           "--batch-size", str(g["batch_size"]), "--max-steps", str(WARMUP_STEPS + steps), "--warmup-steps", "2",
           "--eval-batches", "0", "--backend", "cpu", "--matmul", matmul, "--threads", str(threads),
           "--output-dir", os.path.join(workdir, f"out_{matmul}"), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trainer exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    report = json.loads(proc.stdout)
    step = statistics.median(timed_steps(report, WARMUP_STEPS))
    return {"tokens_per_s": g["batch_size"] * g["seq_len"] / step, "median_step_s": step,
            "timed_steps": steps, "final_loss": report["final_train_loss"]}


def run(args, workdir):
    threads = os.cpu_count()
    nfn = {}
    for matmul in ("f32", "bf16"):
        try:
            nfn[f"matmul_{matmul}"] = nfn_rate(args.trainer, workdir, matmul, threads, args.steps)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            nfn[f"matmul_{matmul}"] = {"error": str(e)}
    ref = {"skipped": True}
    if not args.skip_torch:
        g = GEOMETRY
        cmd = [sys.executable, os.path.join(HERE, "bench_train_torch_cpu.py"), "--json", "--threads", str(threads),
               "--warmup", str(WARMUP_STEPS),
               "--steps", str(args.steps)] + [f"--{k.replace('_', '-')}={v}" for k, v in g.items()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        ref = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {
            "error": f"reference exited {proc.returncode}: {proc.stderr.strip()[-400:]}"}
    ok = {m: r["tokens_per_s"] for m, r in nfn.items() if "tokens_per_s" in r}
    best = max(ok, key=ok.get) if ok else None
    ratio = ok[best] / ref["tokens_per_s"] if best and ref.get("tokens_per_s") else None
    return {"backend": "cpu", "geometry": GEOMETRY, "threads": threads, "steps": args.steps,
            "nfn": {"modes": nfn, "best_mode": best, "tokens_per_s": ok.get(best)},
            "pytorch": ref, "ratio": ratio}
