"""`nfn kernels bench`: each op of an op library timed at model shapes by the native
nfn_kernels_bench (cc/bin/kernels_bench.cc, whose cases and timer tools/bench_ops shares),
then turned here into rates and fractions of the device's peak. Standard library only.
"""
import json
import os
import subprocess

from nfn import cuda_runtime, native_bin
from nfn.errors import UserError

BENCH = "nfn_kernels_bench"


def command(path, args):
    """The native benchmark's command line for the parsed `nfn kernels bench` flags."""
    cmd = [path, "--device", args.device, "--iterations", str(args.iterations)]
    for flag, value in (("--tile-ops-lib", args.tile_ops_lib), ("--ops", args.ops), ("--shapes", args.shapes),
                        ("--dtype", args.dtype)):
        if value:
            cmd += [flag, value]
    for option in args.configure or []:
        cmd += ["--configure", option]
    return cmd


def measure(args, env=None):
    """The native benchmark's report for these flags; its one-line error as a UserError."""
    if args.iterations < 1:
        raise UserError(f"--iterations {args.iterations}: expected a count of at least 1")
    env = cuda_runtime.child_env(env)  # as `nfn train` starts a trainer (cuBLASLt, cuDNN)
    path = native_bin.find(BENCH, env)
    if path is None:
        raise UserError(f"{BENCH} is not built; run through `bazel run //py:nfn` or point "
                        f"${native_bin.BINARY_ENV} at a directory holding it")
    proc = subprocess.run(command(path, args), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"{BENCH} exited with {proc.returncode}"]
        _, sep, message = lines[-1].partition(": error: ")
        raise UserError(message if sep else lines[-1])
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise UserError(f"{path} printed no JSON report") from None


def add_rates(report):
    """Each row's rate (GFLOP/s for compute-bound ops, GB/s for the others) and its fraction
    of the matching peak (None where the peak is unknown, or for host-device copies)."""
    peak = report["peak"]
    for row in report["rows"]:
        seconds = row["median_ms"] * 1e-3
        if row["flops"] > 0:
            row["unit"], row["rate"], top = "GFLOP/s", row["flops"] / seconds * 1e-9, peak["compute_gflops"]
        else:
            row["unit"], row["rate"] = "GB/s", row["bytes"] / seconds * 1e-9
            top = None if row["host_link"] else peak["memory_gbps"]
        row["peak_fraction"] = row["rate"] / top if top else None
    return report


def _shape_text(s):
    padded = f" (padded {s['Vp']})" if s["Vp"] != s["vocab"] else ""
    return f"{s['name']} L{s['L']} NH{s['NH']} C{s['C']} T{s['T']} B{s['B']} V{s['vocab']}{padded}"


def format_report(r):
    """The header (library, device, host, peak, shapes) and a table of rows."""
    host = r["host"]
    options = ", ".join(f"{k}={v}" for k, v in r["configure"].items())
    lines = [
        f"library  {r['backend']}: {r['library']}",
        f"device   {r['device'] or 'unknown'}; {r['dtype']} storage" + (f"; {options}" if options else ""),
        f"host     {host['model']} ({' '.join(host['features']) or 'none of the listed features'}), "
        f"{host['cores']} cores",
        f"peak     {r['peak']['basis']}",
        f"shapes   {'; '.join(_shape_text(s) for s in r['shapes'])}",
        f"timing   median of {r['iterations']} samples; a sample is enough calls to fill 1 ms",
        "",
    ]
    table = [("shape", "op", "category", "variant", "median ms", "rate", "unit", "% peak")]
    for row in r["rows"]:
        fraction = row["peak_fraction"]
        table.append((row["shape"], row["op"], row["category"], row["variant"], f"{row['median_ms']:.3f}",
                      f"{row['rate']:.1f}", row["unit"], "-" if fraction is None else f"{100 * fraction:.1f}"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    right = {4, 5, 7}  # numbers
    for line in table:
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def report(args, host, env=None):
    """The benchmark's report with rates and the host (its CPU's model and features, as
    `nfn kernels doctor` reads them, and the cores this process may run on) added."""
    r = add_rates(measure(args, env))
    r["host"] = dict(host, cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    return r
