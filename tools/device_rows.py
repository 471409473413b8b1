#!/usr/bin/env python3
"""One line of tools/device_check.sh's table from a step's output: a verdict word (PASS, FAIL
or INFO), a space, then what the step measured.

    device_rows.py train CPU_JSON GPU_JSON BOUND STATUS   a training run on cuda against cpu
    device_rows.py same EAGER_JSON OTHER_JSON             graphs/overlap: the same losses bit for bit
    device_rows.py ops BENCH_OPS_LOG                      bench_ops' runs, "== attention=..." before each
    device_rows.py bench BENCH_JSON BENCH_ERR SMI_CSV     a tools/bench_train.py --json result (else
                                                          the runs its stderr says finished), with
                                                          each run's median SM clock under load
    device_rows.py best BENCH_JSON BENCH_ERR              that result's fastest nfn mode (a bare word)
    device_rows.py clocks SMI_CSV                         nvidia-smi's samples during the benchmark
    device_rows.py profile NCU_CSV PROFILE_TXT            Nsight Compute's kernel times of a step

Standard library only (the device machine runs it with whatever python3 it has). Tested on the
formats the tools write: tests/tools/device_rows_test.py.
"""
import collections
import csv
import inspect
import json
import re
import statistics
import sys

from bench_train import nfn_summary  # beside this file, and standard library only too


def load_report(path, status=""):
    """A trainer's --json report; ValueError with the reason (its stderr's last line) if none."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        try:
            with open(path[:-len(".json")] + ".err") as f:
                err = f.read().strip().splitlines()
        except OSError:
            err = []
        why = "ran past its time limit" if status == "124" else "no report"
        name = path.rsplit("/", 1)[-1][:-len(".json")]
        raise ValueError(f"{name}: {why}: {err[-1][:160] if err else e}") from None


def train(cpu_path, gpu_path, bound, status):
    """The cuda run's losses against the cpu run's, step by step, within a relative bound."""
    try:
        cpu, gpu = load_report(cpu_path), load_report(gpu_path, status)
    except ValueError as e:
        return f"FAIL {e}"
    a = [loss for _, loss in cpu["train_losses"]]  # rows are [step, loss]
    b = [loss for _, loss in gpu["train_losses"]]
    if not b:
        return "FAIL the cuda run reported no losses"
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
    ok = worst < float(bound) and b[-1] < b[0]
    return f"{'PASS' if ok else 'FAIL'} loss {b[0]:.3f}->{b[-1]:.3f}, worst step rel diff vs cpu {worst:.2e} (bound {bound})"


def same(eager_path, other_path):
    """A run with graphs (and overlap) against the op-by-op run: bitwise equal losses, one recording."""
    try:
        eager, other = load_report(eager_path), load_report(other_path)
    except ValueError as e:
        return f"FAIL {e}"
    equal = eager["train_losses"] == other["train_losses"]
    ms = lambda r, key: 1e3 * statistics.median(r[key][1:])  # steady state: the first step is op by op
    ok = equal and other["op_library"]["graph_recordings"] == 1
    return (f"{'PASS' if ok else 'FAIL'} losses {'bitwise equal' if equal else 'DIFFER'}; median step "
            f"{ms(other, 'step_seconds'):.2f} ms with graphs, {ms(eager, 'step_seconds'):.2f} ms op by op "
            f"(enqueue {ms(other, 'enqueue_seconds'):.2f} vs {ms(eager, 'enqueue_seconds'):.2f} ms)")


OPS_ROW = re.compile(r"(.+?)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+\S*\s+([\d.]+)$")
OPS_TOKENS = re.compile(r"\((\d+) tokens per micro-step\)")


def parse_ops(text):
    """bench_ops' runs in a log: [(label, {op: (ms a call, ms a micro-step)}, tokens a micro-step)]."""
    runs, label = [], ""
    for line in text.splitlines():
        if line.startswith("== attention="):
            label = line.split("attention=", 1)[1].replace(" --configure ", " ")
        elif line.startswith("cuda ("):  # a run's header
            runs.append((label, {}, None))
        elif runs and (m := OPS_ROW.match(line)):
            runs[-1][1][m.group(1).strip()] = (float(m.group(3)), float(m.group(4)))
        elif runs and (m := OPS_TOKENS.search(line)):
            runs[-1] = (runs[-1][0], runs[-1][1], int(m.group(1)))
    return runs


def ops(log_path):
    """The first run's micro-step and costliest ops; the other runs against it."""
    with open(log_path) as f:
        text = f.read()
    runs = parse_ops(text)
    if not runs or not runs[0][1]:
        last = [l for l in text.splitlines() if l.strip()]
        return f"FAIL {last[-1][:200] if last else 'no output'}"
    _, first, tokens = runs[0]
    total = sum(step for _, step in first.values())
    top = ", ".join(f"{n} {s:.1f}" for n, (_, s) in sorted(first.items(), key=lambda kv: -kv[1][1])[:3])
    attn = lambda r: sum(r.get(k, (0, 0))[0] for k in ("attention_forward", "attention_backward"))
    parts = ["attention fwd+bwd a call: " + ", ".join(
        f"{name} {attn(r):.2f} ms" for name, r, _ in runs if "gemm_tune" not in name and "attention_forward" in r)]
    gemms = lambda r: sum(step for n, (_, step) in r.items() if n.startswith(("linear", "lm_head_cross_entropy (")))
    tuned = [r for name, r, _ in runs if "gemm_tune" in name]
    if tuned:
        parts.append(f"GEMM ops a micro-step {gemms(first):.2f} ms, {gemms(tuned[0]):.2f} with gemm_tune")
    backs = lambda r: sum(step for n, (_, step) in r.items() if n.startswith("linear_backward") and ":" not in n)
    over = [r for name, r, _ in runs if "overlap" in name]
    if over and backs(over[0]):
        parts.append(f"linear_backward a micro-step {backs(first):.2f} ms, {backs(over[0]):.2f} with overlap")
    label = lambda n: n.split("rows=")[1] if "rows=" in n else "weighted" if "weighted" in n else "auto"  # noqa: E731
    parts.append("lm_head a call by rows a chunk: " + ", ".join(
        f"{label(n)} {ms:.2f}" for n, (ms, _) in first.items() if n.startswith("lm_head")))
    emb = [f"{what} {first[n][0]:.3f} ms" for what, n in (("spread ids", "embedding_backward"),
                                                          ("text-like ids", "embedding_backward (text-like ids)"))
           if n in first]
    if emb:
        parts.append("embedding_backward a call: " + ", ".join(emb))
    fused = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("fused epilogues:")), "?")
    parts.append(f"cuBLASLt epilogues: {fused}")
    return f"PASS {total:.1f} ms a micro-step of {tokens or '?'} tokens; top ms: {top}; " + "; ".join(parts)


def load_bench(path, err_path):
    """bench_train's result; where it has none (stopped from outside), one put together from the
    "bench_train: NAME JSON" lines its stderr has of the runs that finished, "stopped" set."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        why = e
    modes, ref = {}, None
    try:
        with open(err_path) as f:
            for line in f:
                m = re.match(r"bench_train: (nfn (\S+)|pytorch) (\{.*\})$", line.strip())
                if m and m.group(2):
                    modes[m.group(2)] = json.loads(m.group(3))
                elif m:
                    ref = json.loads(m.group(3))
    except OSError:
        pass
    if not modes and ref is None:
        raise ValueError(f"no result ({why})")
    nfn = nfn_summary(modes)
    ref = ref or {"error": "stopped before the reference finished"}
    ratio = (nfn["tokens_per_s"] / ref["tokens_per_s"]
             if nfn.get("tokens_per_s") and ref.get("tokens_per_s") and "error" not in ref else None)
    return {"nfn": nfn, "pytorch": ref, "ratio": ratio, "stopped": True}


def bench(path, err_path, smi_path):
    """Each nfn mode's tokens/s and MFU (and the host's time to issue a step against the step:
    near it, launches bound the step; and the median SM clock of the samples taken under load
    while it ran, so that a mode's gain is not a cooler GPU's), the reference's, the ratio."""
    try:
        r = load_bench(path, err_path)
    except (OSError, ValueError) as e:
        return f"FAIL {e}"
    try:
        samples = [(t, mhz) for t, mhz, watts, _, _ in smi_samples(smi_path) if t is not None and watts > BUSY_WATTS]
    except OSError:
        samples = []

    def cell(x):
        if "tokens_per_s" not in x or "error" in x:  # a rate with an error (a NaN loss) is no rate
            return x.get("error", "?")[:120]
        host = f" host {x['enqueue_ms']:.1f}/{x['step_ms']:.1f} ms" if x.get("enqueue_ms") else ""
        mhz = [m for t, m in samples if x.get("t0", 0) <= t <= x.get("t1", 0)]
        clock = f" {statistics.median(mhz):.0f} MHz" if mhz else ""
        return f"{x['tokens_per_s']:.0f} tok/s MFU {100 * x['mfu']:.1f}%{host}{clock}"

    paths = " ".join(f"[{k}: {cell(v)}]" for k, v in r["nfn"].get("modes", {}).items())
    ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "none"
    stopped = "stopped from outside; finished runs only: " if r.get("stopped") else ""
    verdict = "PASS" if r.get("ratio") and not stopped else "FAIL"
    return f"{verdict} {stopped}nfn {paths} | torch {cell(r['pytorch'])} | ratio {ratio}"


def best(path, err_path):
    """The fastest nfn mode of a bench_train result, or nothing."""
    try:
        return load_bench(path, err_path)["nfn"].get("mode") or ""
    except (OSError, ValueError, KeyError):
        return ""


BUSY_WATTS = 300  # samples above this draw are a step running, not a process starting


def smi_samples(csv_path):
    """device_check's nvidia-smi samples: [(epoch seconds or None, MHz, W, C, clock event reasons)].
    Lines are "EPOCH, MHz, W, C[, reasons]" (the sampler's time first; empty where the shell
    has no $EPOCHREALTIME) or, as nvidia-smi writes them, "MHz, W, C[, reasons]"; unreadable
    ones are left out."""
    samples = []
    with open(csv_path) as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            t = None
            if len(fields) >= 4 and (fields[0] == "" or re.fullmatch(r"\d{9,}(\.\d*)?", fields[0])):
                t, fields = (float(fields[0]) if fields[0] else None), fields[1:]
            try:
                mhz, watts, temp = float(fields[0]), float(fields[1]), float(fields[2])
            except (ValueError, IndexError):
                continue
            samples.append((t, mhz, watts, temp, fields[3] if len(fields) > 3 else "?"))
    return samples


def clocks(csv_path):
    """SM clock, power and temperature while a step runs (samples above BUSY_WATTS)."""
    busy = [b[1:] for b in smi_samples(csv_path) if b[2] > BUSY_WATTS]
    if not busy:
        return f"INFO no samples above {BUSY_WATTS} W (nvidia-smi: smi.csv in logs.tgz)"
    mhz = sorted(b[0] for b in busy)
    reasons = " ".join(sorted({b[3] for b in busy}))
    return (f"INFO under load ({len(busy)} samples): SM clock median {statistics.median(mhz):.0f} MHz "
            f"(min {mhz[0]:.0f}, max {mhz[-1]:.0f}), power median {statistics.median(b[1] for b in busy):.0f} W "
            f"(max {max(b[1] for b in busy):.0f}), max {max(b[2] for b in busy):.0f} C; clock event reasons {reasons}")


NCU_SCALE = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}


def profile(csv_path, out_path):
    """The second of three profiled steps (embedding_forward to embedding_forward), its kernels
    summed by name into out_path, costliest first, then in order."""
    rows = []  # (kernel name, ms)
    with open(csv_path) as f:
        for r in csv.DictReader(l for l in f if l.startswith('"')):
            scale = NCU_SCALE.get(r.get("Metric Unit"))
            if r.get("Metric Name") == "gpu__time_duration.sum" and scale is not None:
                rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale))
    starts = [i for i, (name, _) in enumerate(rows) if "embedding_forward_kernel" in name]
    if len(starts) < 3:
        return f"FAIL {len(rows)} kernels profiled, {len(starts)} step starts (embedding_forward) found, 3 wanted"
    step = rows[starts[-2]:starts[-1]]
    short = lambda n: n.replace("(anonymous namespace)::", "").replace("void ", "").split("(")[0][:110]
    by = collections.defaultdict(lambda: [0, 0.0])
    for name, ms in step:
        by[short(name)][0] += 1
        by[short(name)][1] += ms
    total = sum(ms for _, ms in step)
    ranked = sorted(by.items(), key=lambda kv: -kv[1][1])
    with open(out_path, "w") as f:
        f.write(f"step 2: {len(step)} kernels, {total:.2f} ms of kernel time\n{'ms':>8} {'calls':>5}  kernel\n")
        f.writelines(f"{ms:8.3f} {n:5d}  {name}\n" for name, (n, ms) in ranked)
        f.write("\nthe step's kernels in order (ms):\n")
        f.writelines(f"{ms:8.3f}  {short(name)}\n" for name, ms in step)
    top = ", ".join(f"{name[:40]} {ms:.2f}" for name, (_, ms) in ranked[:3])
    return f"PASS {len(step)} kernels, {total:.2f} ms of kernel time a step; top ms: {top} ({out_path.rsplit('/', 1)[-1]})"


KINDS = {fn.__name__: fn for fn in (train, same, ops, bench, best, clocks, profile)}


def main(argv):
    fn = KINDS.get(argv[0]) if argv else None
    files = fn and [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    if not fn or len(argv) - 1 != len(files):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        print(fn(*argv[1:]))
    except Exception as e:  # one table row, whatever the input held
        print(f"FAIL {argv[0]}: {type(e).__name__}: {str(e)[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
