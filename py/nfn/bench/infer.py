"""`nfn bench infer`: prefill and decode tokens/s, weight bytes and peak memory of the KV-cached
engine over a grid of weight formats, batch sizes and prompt lengths, one configuration a
process.

Each configuration (weights format, batch, prompt length) runs in a fresh interpreter
(nfn.bench.worker), so its peak resident set is its own and not the last one's: the engine is
opened, one untimed generation runs, then `repeats` greedy generations of `new_tokens` tokens
after prompts of random token ids are timed, and the medians reported. Prefill tokens/s is the
prompts' tokens over their one forward; decode tokens/s is the tokens fed back through the
caches over the decode time (as `nfn infer --json` counts them), every sequence's counted.

Batch B: B prompts of the same length (different ids) generated together (generate_batch: one
cache slot a sequence, one forward of B rows a decode step); batch 1 is generate itself.
"""
import json
import os
import random
import subprocess
import sys

from nfn.errors import UserError

WEIGHT_FORMATS = ("f32", "bf16", "q8_0", "q4_1", "nf4")
BATCH_NOTE = "batch B: B prompts of the length at once, one cache slot each; tok/s counts every sequence's"

def prompt_tokens(n, vocab, seed=0):
    """n token ids drawn uniformly from the vocabulary (the same on every side of a comparison)."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def batch_prompts(batch, n, vocab, seed=0):
    """A batch's prompts: prompt b is prompt_tokens(n, vocab, seed + b)."""
    return [prompt_tokens(n, vocab, seed + b) for b in range(batch)]


def parse_counts(text, flag):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected comma-separated whole numbers") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} {text!r}: expected one or more counts of at least 1")
    return sorted(set(values))


def parse_formats(text, family):
    formats = [v.strip() for v in text.split(",") if v.strip()] if text else None
    if formats is None:
        return list(WEIGHT_FORMATS) if family != "gpt" else ["f32"]
    for f in formats:
        if f not in WEIGHT_FORMATS:
            raise UserError(f"--weights {f}: expected some of {', '.join(WEIGHT_FORMATS)}")
        if f != "f32" and family == "gpt":
            raise UserError(f"--weights {f}: a dense GPT checkpoint runs in f32 only (quantized weights are "
                            "nanochat's and llama's)")
    return list(dict.fromkeys(formats))


def describe(spec):
    """(resolved checkpoint path, family, geometry, parameter count) of --checkpoint spec, from
    headers alone."""
    from nfn.infer import checkpoint
    ckpt = checkpoint.resolve(spec, header=True)
    if ckpt.kind == "decoder":
        family, geom, tensors = checkpoint.decoder_header(ckpt.path)
        count = 0
        for t in tensors:
            n = 1
            for d in t["shape"]:
                n *= d
            count += n
        return ckpt.path, family, geom, count
    if ckpt.kind == "hf":
        from nfn.infer import hf
        geom = hf.load(ckpt.path)[0]
        return ckpt.path, "gpt", geom, None
    return ckpt.path, "gpt", checkpoint.geometry(ckpt.header), ckpt.header["parameters"]


def host_info(backend):
    """The CPU's model and GEMM features and the cores this process may use; on CUDA the GPUs."""
    from nfn.cli.kernels import cpu_info, gpus_from_libcuda, gpus_from_nvidia_smi
    info = {"cpu": cpu_info(), "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count()}
    if backend == "cuda":
        info["gpu"] = gpus_from_nvidia_smi(os.environ) or gpus_from_libcuda()
    return info


def run_config(cfg, timeout):
    """One configuration's row, measured by nfn.bench.worker in a fresh interpreter; a row with
    "error" where it failed or ran past timeout seconds."""
    from nfn import child
    where = {"weights": cfg["weights"], "batch": cfg["batch"], "prompt_tokens": cfg["prompt_tokens"]}
    try:
        proc = subprocess.run(child.argv("nfn.bench.worker:main", [json.dumps(cfg)]), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(where, error=f"ran past {timeout} s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
        return dict(where, error=why)
    return json.loads(lines[-1])


def progress(row):
    """One stderr line a finished configuration, so a long grid shows it is moving."""
    what = row.get("error") or (f"prefill {rate(row['prefill_tokens_per_second'])}, "
                                f"decode {rate(row['decode_tokens_per_second'])} tok/s")
    print(f"nfn bench: {row['weights']} batch {row['batch']} prompt {row['prompt_tokens']}: {what}", file=sys.stderr,
          flush=True)


def run(args):
    """The report of `nfn bench infer` for the parsed arguments."""
    lengths = parse_counts(args.prompt_lengths, "--prompt-lengths")
    batches = parse_counts(args.batch, "--batch")
    if args.new_tokens < 1:
        raise UserError(f"--new-tokens must be at least 1 (got {args.new_tokens})")
    if args.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {args.repeats})")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0 (got {args.threads})")
    path, family, geom, parameters = describe(args.checkpoint)
    formats = parse_formats(args.weights, family)
    need = max(lengths) + args.new_tokens
    if family == "gpt" and args.context:
        raise UserError(f"--context: {path} is a dense GPT checkpoint; its cache holds the model's "
                        f"{geom['max_seq_len']} positions")
    context = min(args.context or need, geom["max_seq_len"]) if family != "gpt" else geom["max_seq_len"]
    if need > context:
        raise UserError(f"the longest prompt ({max(lengths)}) plus --new-tokens ({args.new_tokens}) is {need} "
                        f"positions, more than the {context} the cache holds")
    host = host_info(args.backend)
    threads = args.threads or (host["cores"] if args.backend == "cpu" else 0)
    rows = []
    for fmt in formats:
        for batch in batches:
            for n in lengths:
                cfg = {"checkpoint": path, "weights": fmt, "batch": batch, "prompt_tokens": n,
                       "new_tokens": args.new_tokens, "repeats": args.repeats, "backend": args.backend,
                       "threads": threads, "context": context if family != "gpt" else 0, "seed": 0}
                row = run_config(cfg, args.timeout)
                row.pop("greedy_tokens", None)
                rows.append(row)
                progress(row)
    return {"checkpoint": path, "family": family, "parameters": parameters, "geometry": geom,
            "backend": args.backend, "host": host, "threads": threads if args.backend == "cpu" else None,
            "context": context, "batch": batches, "batch_note": BATCH_NOTE, "new_tokens": args.new_tokens,
            "repeats": args.repeats, "rows": rows}


def mb(n):
    return f"{n / 1e6:.1f}" if n is not None else "-"


def rate(x):
    return f"{x:.1f}" if x is not None else "-"


def format_table(report):
    host, cpu = report["host"], report["host"]["cpu"]
    where = f"cpu {cpu['model']} ({' '.join(cpu['features']) or 'no listed features'}), {host['cores']} cores"
    if report["backend"] == "cpu":
        where += f", {report['threads']} threads"
    else:
        gpus = (host.get("gpu") or {}).get("devices") or []
        where = f"cuda: gpu {', '.join(d['name'] for d in gpus) or 'none found'}; {where}"
    params = f", {report['parameters']:,} parameters" if report["parameters"] else ""
    lines = [f"checkpoint {report['checkpoint']} ({report['family']}{params})", where,
             f"context {report['context']}, {report['new_tokens']} new tokens, median of {report['repeats']}; "
             f"{report['batch_note']}"]
    matmul = {r["matmul"] for r in report["rows"] if r.get("weights") == "bf16" and "matmul" in r}
    if matmul:
        lines.append(f"GEMMs of the bf16 rows: {', '.join(sorted(matmul))}")
    lines.append("")
    memory = ("device MB", "") if report["backend"] == "cuda" else ("peak RSS MB", "end RSS MB")
    lines.append(f"{'weights':8s} {'batch':>5s} {'prompt':>6s} {'prefill tok/s':>13s} {'decode tok/s':>12s} "
                 f"{'weights MB':>10s} {memory[0]:>11s} {memory[1]:>10s}".rstrip())
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"{r['weights']:8s} {r['batch']:5d} {r['prompt_tokens']:6d}  error: {r['error']}")
            continue
        used = (r["device_bytes"], None) if report["backend"] == "cuda" else (r["peak_rss_bytes"], r["end_rss_bytes"])
        lines.append(f"{r['weights']:8s} {r['batch']:5d} {r['prompt_tokens']:6d} "
                     f"{rate(r['prefill_tokens_per_second']):>13s} "
                     f"{rate(r['decode_tokens_per_second']):>12s} {mb(r['weight_bytes']):>10s} {mb(used[0]):>11s} "
                     f"{mb(used[1]) if used[1] is not None else '':>10s}".rstrip())
    return "\n".join(lines)


def main(args):
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_table(report))
    return 1 if any("error" in r for r in report["rows"]) else 0
