"""The CPU half of tools/bench_train.py: nfn's trainer (f32 and bf16 GEMMs) against the
PyTorch CPU reference (tools/bench_train_torch_cpu.py) on the same small GPT, same threads;
with --family nanochat, nfn's nanochat trainer (the host's default GEMMs) against the
reference's nanochat (tools/bench_nanochat_torch.py) at a small nanochat's geometry.

Both sides are timed the same way: the median of --steps timed steps (nfn's per-step wall
times come from its report's "step_seconds", after 3 untimed steps in each fresh trainer; the
reference warms and compiles each mode once, in one long-lived process), in short rounds that
alternate the two sides (--rounds); the ratio is the median of the rounds' ratios.

Each side has --timeout seconds a step of its own: a trainer run, the reference's start (every
mode built and warmed up) and each of its answers (one mode's steps of a round). A trainer run
past it is killed and reported as its mode's error; a reference past it is killed with the
processes it started (torch.compile's workers), and its modes report the error from then on.
"""
import contextlib
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading

from bench_train import timed_steps, write_shard_tokens
from bench_train_torch_cpu import FAMILY_MODES as TORCH_MODES  # standard library only at import

HERE = os.path.dirname(os.path.abspath(__file__))
GEOMETRY = {"layers": 4, "heads": 4, "channels": 256, "seq_len": 256, "batch_size": 8, "vocab": 8192}
# A nanochat of --depth 4's style: 2 heads of 128 (kv heads as many), windows SSSL.
NANOCHAT_GEOMETRY = {"layers": 4, "heads": 2, "kv_heads": 2, "channels": 256, "seq_len": 256, "batch_size": 8,
                     "vocab": 1024, "window_pattern": "SSSL"}
GEOMETRIES = {"gpt": GEOMETRY, "nanochat": NANOCHAT_GEOMETRY}
# nfn's modes: the GPT's GEMMs both ways; nanochat's the host's default ("default").
NFN_MODES = {"gpt": ["f32", "bf16"], "nanochat": ["default"]}
WARMUP_STEPS = 3  # bench_train_torch_cpu.py's --warmup default


def nfn_modes(args, workdir, matmuls, threads):
    out = {}
    for matmul in matmuls:
        try:
            out[f"matmul_{matmul}"] = nfn_rate(args.trainer, workdir, matmul, threads, args.steps,
                                               args.timeout, args.family)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            out[f"matmul_{matmul}"] = {"error": str(e)}
    return out


def nfn_rate(trainer, workdir, matmul, threads, steps, timeout=None, family="gpt"):
    g = GEOMETRIES[family]
    data = os.path.join(workdir, "data")
    if not os.path.isdir(data):
        os.makedirs(data)
        rng = random.Random(0)
        ntok = g["batch_size"] * g["seq_len"] * (WARMUP_STEPS + steps + 2) + 1
        write_shard_tokens(os.path.join(data, "bench_train_000000.bin"),
                           [rng.randrange(g["vocab"]) for _ in range(ntok)])
    cmd = [trainer, "--train-data", data, "--vocab-size", str(g["vocab"]), "--num-layers", str(g["layers"]),
           "--num-heads", str(g["heads"]), "--model-dim", str(g["channels"]), "--train-seq-len", str(g["seq_len"]),
           "--batch-size", str(g["batch_size"]), "--max-steps", str(WARMUP_STEPS + steps)]
    if family == "gpt":
        cmd += ["--warmup-steps", "2", "--eval-batches", "0", "--backend", "cpu", "--matmul", matmul]
    else:  # nanochat's own schedule; no checkpoint or sample, which no step times
        cmd += ["--num-kv-heads", str(g["kv_heads"]), "--window-pattern", g["window_pattern"], "--eval-batches", "0",
                "--backend", "cpu", "--no-checkpoint", "--sample-tokens", "0"]
    cmd += ["--threads", str(threads), "--output-dir", os.path.join(workdir, f"out_{matmul}"), "--json"]
    shutil.rmtree(os.path.join(workdir, f"out_{matmul}"), ignore_errors=True)  # a fresh run every round
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:  # killed
        raise RuntimeError(f"trainer ran past {timeout} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"trainer exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    report = json.loads(proc.stdout)
    step = statistics.median(timed_steps(report, WARMUP_STEPS))
    out = {"tokens_per_s": g["batch_size"] * g["seq_len"] / step, "median_step_s": step,
           "timed_steps": steps, "final_loss": report["final_train_loss"]}
    if family != "gpt":  # which GEMMs the default chose
        out["matmul"] = (report.get("op_library") or {}).get("matmul")
    return out


class TorchReference:
    """tools/bench_train_torch_cpu.py --serve: every mode built and compiled once, then asked
    for `steps` more steps per round, so rounds stay short enough to alternate with nfn's. Its
    start and each answer have `timeout` seconds (None: no limit); past them it is killed."""

    def __init__(self, threads, modes, workdir, timeout=None, family="gpt"):
        cmd = [sys.executable, os.path.join(HERE, "bench_train_torch_cpu.py"), "--serve", "--threads", str(threads),
               "--warmup", str(WARMUP_STEPS), "--modes", ",".join(modes)]
        cmd += [f"--{k.replace('_', '-')}={v}" for k, v in GEOMETRIES[family].items()]
        if family != "gpt":  # a compilation past half the limit skips its mode, not the whole reference
            cmd += ["--family", family] + (["--start-seconds", str(timeout / 2)] if timeout else [])
        self.timeout = timeout
        self.stopped = None  # why it was killed, once it was
        # stderr to a file: compiler warnings must never fill a pipe nobody reads mid-run
        self.log = open(os.path.join(workdir, "reference.log"), "w+")
        # A session of its own: stopped, it is stopped with every process it started.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        # Its lines through a queue, so that waiting for one can stop at the timeout.
        self.lines = queue.Queue()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        hello = self._read()
        self.errors = hello.get("errors", {}) if "ready" in hello else {m: hello for m in modes}

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # end of its output

    def _read(self):
        try:
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            self._kill()
            self.stopped = f"reference ran past {self.timeout} s"
            return {"error": self.stopped}
        if not line:
            self.proc.wait()
            self.log.seek(0)
            last = (self.log.read().strip().splitlines() or [""])[-1]  # a traceback's last line names it
            return {"error": f"reference exited {self.proc.returncode}: {last[-400:]}"}
        return json.loads(line)

    def rates(self, steps, modes):
        out = {}
        for mode in modes:
            if mode in self.errors:
                out[mode] = self.errors[mode]
                continue
            if self.stopped:
                out[mode] = {"error": self.stopped}
                continue
            if self.proc.poll() is not None:
                out[mode] = {"error": f"reference exited {self.proc.returncode}"}
                continue
            try:
                self.proc.stdin.write(f"{mode} {steps}\n")
                self.proc.stdin.flush()
            except BrokenPipeError:  # it ended meanwhile: _read says how
                pass
            out[mode] = self._read()
            out[mode].pop("mode", None)
        return out

    def _kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()  # its cue to end
            try:
                self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.pump.join(timeout=5)  # at the end of its output
        if not self.pump.is_alive():
            self.proc.stdout.close()
        self.log.close()


def best(modes):
    ok = {m: r["tokens_per_s"] for m, r in modes.items() if "tokens_per_s" in r}
    return (max(ok, key=ok.get), max(ok.values())) if ok else (None, None)


def median_modes(rounds, side):
    """Each mode's median tokens/s and step time over the rounds that ran it, and its error in
    any round (as "error": round 1's, "errors": every round's that failed)."""
    out = {}
    for mode, first in rounds[0][side].items():
        ran = [r[side][mode] for r in rounds if "tokens_per_s" in r[side].get(mode, {})]
        errors = [f"round {i}: {r[side][mode]['error']}" for i, r in enumerate(rounds, 1)
                  if "error" in r[side].get(mode, {})]
        out[mode] = dict(first) if not ran else dict(first, rounds=len(ran))
        for key in ("tokens_per_s", "median_step_s"):
            if ran:
                out[mode][key] = statistics.median(r[key] for r in ran)
        if errors:
            out[mode]["errors"] = errors
    return out


def run(args, workdir):
    """`args.rounds` rounds of nfn and PyTorch back to back (the order alternating), each side
    timed over `args.steps` steps; the ratio is the median of the rounds' ratios, so a slow
    minute on a shared machine moves one round, not the result. PyTorch's modes are built and
    compiled once in a long-lived process, which keeps a round near half a minute. Modes that
    fail, or run at under a quarter of their side's best in round 1 (PyTorch's bf16 autocast
    without bf16 units), are measured in round 1 only."""
    threads = os.cpu_count()
    family = args.family
    nfn_all = list(NFN_MODES[family])
    torch_all = list(TORCH_MODES[family])
    ref = None if args.skip_torch else TorchReference(threads, torch_all, workdir, args.timeout, family)
    rounds = []
    try:
        for i in range(max(1, args.rounds)):
            if i % 2:  # odd rounds PyTorch first, so a machine slowing or speeding up favours neither
                pt = ref.rates(args.steps, torch_all) if ref else {}
                nfn = nfn_modes(args, workdir, nfn_all, threads)
            else:
                nfn = nfn_modes(args, workdir, nfn_all, threads)
                pt = ref.rates(args.steps, torch_all) if ref else {}
            round_ = {"nfn": nfn, "pytorch": pt}
            nfn_best, ref_best = best(nfn)[1], best(pt)[1]
            # A mode that failed after round 1 leaves its round without a ratio (and so the
            # result: a mode quietly missing from one round would change what is compared).
            failed = i > 0 and any("error" in r for side in (nfn, pt) for r in side.values())
            round_["ratio"] = nfn_best / ref_best if nfn_best and ref_best and not failed else None
            rounds.append(round_)
            if i == 0:  # later rounds: only the modes that can win
                nfn_all = [m for m in nfn_all if nfn[f"matmul_{m}"].get("tokens_per_s", 0) >= (nfn_best or 0) / 4 > 0]
                torch_all = [m for m in torch_all if pt.get(m, {}).get("tokens_per_s", 0) >= (ref_best or 0) / 4 > 0]
    finally:
        if ref is not None:
            ref.close()
    nfn, ref = median_modes(rounds, "nfn"), median_modes(rounds, "pytorch")
    ratios = [r["ratio"] for r in rounds if r["ratio"]]
    nfn_mode, nfn_tps = best(nfn)
    ref_mode, ref_tps = best(ref)
    return {"backend": "cpu", "geometry": GEOMETRIES[family], "threads": threads, "steps": args.steps,
            "rounds": [{"nfn": best(r["nfn"])[1], "pytorch": best(r["pytorch"])[1], "ratio": r["ratio"]}
                       for r in rounds],
            "nfn": {"modes": nfn, "best_mode": nfn_mode, "tokens_per_s": nfn_tps},
            "pytorch": {"skipped": True} if args.skip_torch else {"modes": ref, "best_mode": ref_mode,
                                                                  "tokens_per_s": ref_tps},
            "ratio": statistics.median(ratios) if len(ratios) == len(rounds) else None}
