#!/usr/bin/env python3
"""Prefill and decode tokens/s of nfn's engine against a PyTorch CPU reference of the same weights.

For each prompt length, nfn's rows are those of `nfn bench infer` (one weights format a row:
f32, q8_0, q4_1, nf4) and PyTorch's are a llama forward with a KV cache written here, on the
same f32 weights, in the modes asked for (--torch-modes):

    eager-f32            f32 weights and activations
    eager-bf16-autocast  f32 weights under torch.autocast("cpu", bfloat16)
    eager-bf16           the weights cast to bf16 once, bf16 activations (norms in f32)
    compile-f32          torch.compile of a static-shape step (the cache attended whole, masked)
    compile-bf16         the same with bf16 weights

Every row is batch 1 (nfn's engine decodes one sequence). Each configuration runs in a fresh
process, so its peak resident set (VmHWM) is its own; each times --repeats greedy generations
of --new-tokens tokens after the same random prompt, after one untimed one, and reports
medians. `ratio` is an nfn row over PyTorch's fastest mode at that prompt length; the last JSON
key, "ratio", is nfn's fastest over PyTorch's fastest, the median over the prompt lengths.

Before measuring, the tool checks that the reference runs the same model: the greedy tokens of
nfn (f32) and of the reference (eager-f32) after a short prompt must be equal (exit 1 if not).

    bazel build //py:nfn            # nfn._native and the trainer binary that resolves names
    python3 tools/bench_infer.py --checkpoint smollm2 --json

The checkpoint must be a llama one (SmolLM2: `nfn import --gguf ... --name smollm2`). The
reference is used only by this script; nfn never imports PyTorch.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_MODES = ("eager-f32", "eager-bf16-autocast", "eager-bf16", "compile-f32", "compile-bf16")
CHECK_PROMPT, CHECK_TOKENS = 8, 16  # the same-model check: a short prompt, 16 greedy tokens


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=False, help="a llama checkpoint: artifact name, directory or weights file")
    p.add_argument("--prompt-lengths", default="16,128,512", help="prompt lengths in tokens (default: 16,128,512)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated a run (default: 64)")
    p.add_argument("--weights", default="f32,q8_0,q4_1,nf4", help="nfn's weight formats (default: all four)")
    p.add_argument("--torch-modes", default=",".join(TORCH_MODES),
                   help=f"the reference's modes (default: {','.join(TORCH_MODES)})")
    p.add_argument("--repeats", type=int, default=3, help="timed generations a configuration (default: 3)")
    p.add_argument("--threads", type=int, default=0, help="threads on both sides (default: every usable core)")
    p.add_argument("--timeout", type=int, default=900, help="seconds a configuration may take (default: 900)")
    p.add_argument("--skip-check", action="store_true", help="skip the same-model greedy check")
    p.add_argument("--native-dir", default=None,
                   help="directory holding the built nfn/_native.so (default: bazel-bin/py/nfn)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--torch-worker", metavar="JSON", help=argparse.SUPPRESS)  # one reference configuration
    args = p.parse_args(argv)
    if not args.torch_worker and not args.checkpoint:
        p.error("--checkpoint is required")
    return args


def import_nfn(native_dir):
    """nfn from the source tree, with the built _native module and trainer binary found in
    bazel-bin (or native_dir)."""
    sys.path.insert(0, os.path.join(ROOT, "py"))
    import nfn
    nfn.__path__.append(native_dir or os.path.join(ROOT, "bazel-bin", "py", "nfn"))
    os.environ.setdefault("NFN_NATIVE_BIN_DIR", os.path.join(ROOT, "bazel-bin", "cc", "bin"))
    return nfn


# --- the PyTorch reference ------------------------------------------------------------------

def read_llama(path):
    """(geometry dict, {name: f32 tensor}) of an nfn llama weights file (safetensors whose
    __metadata__ holds the geometry; docs/weights.md)."""
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
        if meta.get("model_family") != "llama":
            raise ValueError(f"{path}: model_family {meta.get('model_family')!r}; the reference is a llama")
        geom = json.loads(meta["geometry"])
        return geom, {k: f.get_tensor(k).float() for k in f.keys()}


class TorchLlama:
    """Hugging Face LlamaForCausalLM's forward (RMSNorm with weight, rotary on half-pairs,
    grouped-query attention, SwiGLU, tied or separate head) with a KV cache of `context`
    positions. static=False attends to the cache's filled part (eager); static=True attends to
    the whole cache under a mask, so shapes do not change from token to token (torch.compile)."""

    def __init__(self, torch, geom, tensors, context, dtype="f32", static=False):
        self.torch, self.F = torch, torch.nn.functional
        self.L, self.NH, self.NKV, self.HD = (geom[k] for k in ("num_layers", "num_heads", "num_kv_heads", "head_dim"))
        self.V, self.eps = geom["vocab_size"], float(geom.get("norm_eps", 1e-5))
        self.static = static
        wdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64}[dtype]
        ndt = torch.float64 if dtype == "f64" else torch.float32  # RMSNorm in f32 under bf16, as HF's
        self.w = {k: v.to(ndt if k.endswith("norm.weight") else wdt) for k, v in tensors.items()}
        self.head = self.w["model.embed_tokens.weight" if geom.get("tied_head") else "lm_head.weight"]
        inv = 1.0 / float(geom.get("rope_theta", 10000.0)) ** (
            torch.arange(0, self.HD, 2, dtype=torch.float64) / self.HD)
        ang = torch.outer(torch.arange(context, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.cos, self.sin = ang.cos().to(wdt), ang.sin().to(wdt)
        self.k = torch.zeros(self.L, self.NKV, context, self.HD, dtype=wdt)
        self.v = torch.zeros_like(self.k)
        self.causal = torch.ones(context, context, dtype=torch.bool).tril()

    def rms(self, x, weight):
        h = x.float() if x.dtype == self.torch.bfloat16 else x
        h = h * self.torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * weight).to(x.dtype)

    def rotary(self, x, cos, sin):  # x (n, heads, HD); cos, sin (n, 1, HD)
        half = self.HD // 2
        return x * cos + self.torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def step(self, ids, pos):
        """Logits (n, V) of ids (n,) at positions pos (n,), their keys and values cached there."""
        torch, F, w = self.torch, self.F, self.w
        n = ids.shape[0]
        x = w["model.embed_tokens.weight"][ids]
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]
        end = None if self.static else int(pos[-1]) + 1
        mask = self.causal[pos] if self.static else None  # (n, T): key j seen from the query at pos i iff j <= i
        for i in range(self.L):
            pre = f"model.layers.{i}."
            h = self.rms(x, w[pre + "input_layernorm.weight"])
            q = self.rotary(F.linear(h, w[pre + "self_attn.q_proj.weight"]).view(n, self.NH, self.HD), cos, sin)
            k = self.rotary(F.linear(h, w[pre + "self_attn.k_proj.weight"]).view(n, self.NKV, self.HD), cos, sin)
            v = F.linear(h, w[pre + "self_attn.v_proj.weight"]).view(n, self.NKV, self.HD)
            self.k[i].index_copy_(1, pos, k.transpose(0, 1).to(self.k.dtype))
            self.v[i].index_copy_(1, pos, v.transpose(0, 1).to(self.v.dtype))
            keys, values = (self.k[i], self.v[i]) if self.static else (self.k[i, :, :end], self.v[i, :, :end])
            q = q.transpose(0, 1)[None]
            keys, values = keys[None].to(q.dtype), values[None].to(q.dtype)
            if self.static:
                y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            elif n == 1:
                y = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
            elif end == n:  # a prefill from an empty cache: causal within the block
                y = F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
            else:
                y = F.scaled_dot_product_attention(q, keys, values, attn_mask=self.causal[pos, :end],
                                                   enable_gqa=True)
            x = x + F.linear(y[0].transpose(0, 1).reshape(n, self.NH * self.HD), w[pre + "self_attn.o_proj.weight"])
            h = self.rms(x, w[pre + "post_attention_layernorm.weight"])
            g = F.silu(F.linear(h, w[pre + "mlp.gate_proj.weight"])) * F.linear(h, w[pre + "mlp.up_proj.weight"])
            x = x + F.linear(g, w[pre + "mlp.down_proj.weight"])
        return F.linear(self.rms(x, w["model.norm.weight"]), self.head[:self.V])


class Generator:
    """Greedy generation through a TorchLlama in one of TORCH_MODES."""

    def __init__(self, torch, geom, tensors, context, mode):
        self.torch = torch
        compiled, dtype = mode.startswith("compile"), "bf16" if mode in ("eager-bf16", "compile-bf16") else "f32"
        self.model = TorchLlama(torch, geom, tensors, context, dtype, static=compiled)
        self.autocast = mode == "eager-bf16-autocast"
        self.step = torch.compile(self.model.step, dynamic=False) if compiled else self.model.step

    def forward(self, ids, start):
        torch = self.torch
        pos = torch.arange(start, start + len(ids))
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            return self.step(torch.tensor(ids), pos)

    def generate(self, prompt, n):
        """(tokens, prefill seconds, decode seconds), as nfn's engine counts them."""
        t0 = time.perf_counter()
        logits = self.forward(prompt, 0)[-1]
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = [int(logits.argmax())]
        while len(out) < n:
            out.append(int(self.forward(out[-1:], len(prompt) + len(out) - 1)[-1].argmax()))
        return out, prefill, time.perf_counter() - t0


def torch_worker(cfg):
    """One reference configuration, as nfn.bench.worker measures nfn's: one JSON line."""
    import torch
    from nfn.bench.infer import prompt_tokens
    from nfn.bench.worker import peak_rss_bytes, proc_status_bytes
    torch.set_num_threads(cfg["threads"])
    base_rss = proc_status_bytes("VmRSS")
    t0 = time.perf_counter()
    geom, tensors = read_llama(cfg["weights_file"])
    gen = Generator(torch, geom, tensors, cfg["context"], cfg["mode"])
    del tensors
    prompt = prompt_tokens(cfg["prompt_tokens"], geom["vocab_size"], cfg["seed"])
    n = cfg["new_tokens"]
    load_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    gen.generate(prompt, min(n, 2))  # untimed: compilation, first touches
    warmup_seconds = time.perf_counter() - t0
    prefill, decode, tokens = [], [], None
    for _ in range(cfg["repeats"]):
        tokens, p, d = gen.generate(prompt, n)
        prefill.append(len(prompt) / p)
        if n > 1:
            decode.append((n - 1) / d)
    weight_bytes = sum(t.numel() * t.element_size() for t in gen.model.w.values())
    end_rss = proc_status_bytes("VmRSS")
    print(json.dumps({
        "mode": cfg["mode"], "prompt_tokens": len(prompt), "new_tokens": n, "weight_bytes": weight_bytes,
        "load_seconds": load_seconds, "warmup_seconds": warmup_seconds,
        "prefill_tokens_per_second": statistics.median(prefill),
        "decode_tokens_per_second": statistics.median(decode) if decode else None,
        "prefill_runs": prefill, "decode_runs": decode, "peak_rss_bytes": max(peak_rss_bytes(), end_rss or 0),
        "end_rss_bytes": end_rss, "base_rss_bytes": base_rss, "greedy_tokens": tokens}),
        flush=True)


def run_torch_config(cfg, timeout):
    import subprocess
    import nfn
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "py")] + [p for p in sys.path if p]))
    cfg = dict(cfg, nfn_path=list(nfn.__path__))
    where = {"mode": cfg["mode"], "prompt_tokens": cfg["prompt_tokens"]}
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(cfg)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(where, error=f"ran past {timeout} s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return dict(where, error=(proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1])
    return json.loads(lines[-1])


# --- the comparison -------------------------------------------------------------------------

def same_model_check(weights_file, vocab, threads):
    """nfn's f32 engine and the eager f32 reference, greedy after a short prompt: their tokens."""
    import torch
    from nfn import _native
    from nfn.bench.infer import prompt_tokens
    torch.set_num_threads(threads)
    prompt = prompt_tokens(CHECK_PROMPT, vocab, seed=1)
    context = CHECK_PROMPT + CHECK_TOKENS
    engine = _native.InferenceEngine(weights_file=weights_file, context=context, threads=threads)
    ours = engine.generate(prompt, CHECK_TOKENS, temperature=0)["tokens"]
    del engine
    geom, tensors = read_llama(weights_file)
    theirs = Generator(torch, geom, tensors, context, "eager-f32").generate(prompt, CHECK_TOKENS)[0]
    return {"prompt": prompt, "nfn": ours, "pytorch": theirs, "equal": ours == theirs}


def agreeing_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def fastest(rows, key):
    done = {k: r for k, r in rows.items() if r.get(key)}
    return max(done, key=lambda k: done[k][key]) if done else None


def compare(p, nfn_rows, torch_rows):
    """One prompt length's rows, with each nfn row's ratios to PyTorch's fastest mode."""
    out = {"prompt_tokens": p, "nfn": nfn_rows, "pytorch": torch_rows, "pytorch_fastest": {}, "ratio": {}}
    for phase in ("prefill", "decode"):
        key = f"{phase}_tokens_per_second"
        best = fastest(torch_rows, key)
        out["pytorch_fastest"][phase] = best
        for fmt, r in nfn_rows.items():
            if best and r.get(key):
                out["ratio"].setdefault(fmt, {})[phase] = r[key] / torch_rows[best][key]
    a, b = nfn_rows.get("f32", {}).get("greedy_tokens"), torch_rows.get("eager-f32", {}).get("greedy_tokens")
    out["greedy_tokens_matching"] = f"{agreeing_prefix(a, b)}/{len(a)}" if a and b else None
    for r in list(nfn_rows.values()) + list(torch_rows.values()):
        r.pop("greedy_tokens", None)
    return out


def overall_ratio(rows):
    """nfn's fastest format over PyTorch's fastest mode, the median over prompt lengths."""
    result = {}
    for phase in ("prefill", "decode"):
        key = f"{phase}_tokens_per_second"
        ratios = []
        for row in rows:
            a, b = fastest(row["nfn"], key), fastest(row["pytorch"], key)
            if a and b:
                ratios.append(row["nfn"][a][key] / row["pytorch"][b][key])
        result[phase] = statistics.median(ratios) if ratios else None
    return result


def progress(side, name, row):
    print(f"bench_infer: {side} {name} prompt {row.get('prompt_tokens')}: " +
          (f"error {row['error']}" if "error" in row else
           f"prefill {row['prefill_tokens_per_second']:.1f} decode {row['decode_tokens_per_second'] or 0:.1f} tok/s, "
           f"peak RSS {row['peak_rss_bytes'] / 1e6:.0f} MB"), file=sys.stderr, flush=True)


def fmt_row(side, name, r, ratio=None):
    if "error" in r:
        return f"{side:8s} {name:20s} error: {r['error']}"
    rates = [r.get("prefill_tokens_per_second"), r.get("decode_tokens_per_second")]
    cells = [f"{x:.1f}" if x else "-" for x in rates]
    ratios = [f"{ratio[k]:.2f}" if ratio and ratio.get(k) else "" for k in ("prefill", "decode")]
    return (f"{side:8s} {name:20s} {cells[0]:>9s} {ratios[0]:>6s} {cells[1]:>9s} {ratios[1]:>6s} "
            f"{r['weight_bytes'] / 1e6:>10.1f} {r['peak_rss_bytes'] / 1e6:>9.1f} {r['end_rss_bytes'] / 1e6:>9.1f}")


def format_text(result):
    h = result["host"]
    lines = [f"checkpoint {result['checkpoint']}; cpu {h['cpu']['model']} ({' '.join(h['cpu']['features'])}), "
             f"{h['cores']} cores, {result['threads']} threads; context {result['context']}, "
             f"{result['new_tokens']} new tokens, median of {result['repeats']}; batch 1",
             f"same-model check: greedy tokens {'equal' if result['check'].get('equal') else 'DIFFER'}"
             if not result["check"].get("skipped") else "same-model check: skipped"]
    for row in result["rows"]:
        lines += ["", f"prompt {row['prompt_tokens']} tokens (greedy tokens nfn f32 = pytorch eager-f32: "
                      f"{row['greedy_tokens_matching']})",
                  f"{'side':8s} {'weights / mode':20s} {'prefill':>9s} {'ratio':>6s} {'decode':>9s} {'ratio':>6s} "
                  f"{'weights MB':>10s} {'peak RSS':>9s} {'end RSS':>9s}"]
        lines += [fmt_row("nfn", k, r, row["ratio"].get(k)) for k, r in row["nfn"].items()]
        lines += [fmt_row("pytorch", k, r) for k, r in row["pytorch"].items()]
    r = result["ratio"]
    lines += ["", "ratio (nfn fastest / pytorch fastest, median over prompt lengths): "
                  + ", ".join(f"{k} {v:.2f}" if v else f"{k} n/a" for k, v in r.items())]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.torch_worker:
        cfg = json.loads(args.torch_worker)
        import nfn
        nfn.__path__[:] = cfg.pop("nfn_path")
        torch_worker(cfg)
        return 0
    import_nfn(args.native_dir)
    from nfn.bench import infer
    from nfn.errors import UserError
    try:
        lengths = infer.parse_counts(args.prompt_lengths, "--prompt-lengths")
        path, family, geom, parameters = infer.describe(args.checkpoint)
        if family != "llama":
            raise UserError(f"{path}: a {family} checkpoint; the PyTorch reference here is a llama")
        formats = infer.parse_formats(args.weights, family)
        modes = [m.strip() for m in args.torch_modes.split(",") if m.strip()]
        bad = [m for m in modes if m not in TORCH_MODES]
        if bad or not modes:
            raise UserError(f"--torch-modes {args.torch_modes}: expected some of {','.join(TORCH_MODES)}")
        if args.new_tokens < 1 or args.repeats < 1:
            raise UserError("--new-tokens and --repeats must be at least 1")
    except UserError as e:
        print(f"bench_infer: {e}", file=sys.stderr)
        return 2
    host = infer.host_info("cpu")
    threads = args.threads or host["cores"]
    context = max(lengths) + args.new_tokens
    check = {"skipped": True} if args.skip_check else same_model_check(path, geom["vocab_size"], threads)
    if not check.get("skipped") and not check["equal"]:
        print(f"bench_infer: the reference's greedy tokens differ from nfn's: nfn {check['nfn']}, "
              f"pytorch {check['pytorch']}", file=sys.stderr)
        return 1
    rows = []
    for p in lengths:
        base = {"prompt_tokens": p, "new_tokens": args.new_tokens, "repeats": args.repeats, "threads": threads,
                "context": context, "seed": 0}
        nfn_rows, torch_rows = {}, {}
        for fmt in formats:
            nfn_rows[fmt] = infer.run_config(dict(base, checkpoint=path, weights=fmt, backend="cpu"), args.timeout)
            progress("nfn", fmt, nfn_rows[fmt])
        for mode in modes:
            torch_rows[mode] = run_torch_config(dict(base, weights_file=path, mode=mode), args.timeout)
            progress("pytorch", mode, torch_rows[mode])
        rows.append(compare(p, nfn_rows, torch_rows))
    result = {"checkpoint": path, "family": family, "parameters": parameters, "host": host, "threads": threads,
              "context": context, "batch": 1, "batch_note": infer.BATCH_NOTE, "new_tokens": args.new_tokens,
              "repeats": args.repeats, "check": check, "rows": rows, "ratio": overall_ratio(rows)}
    print(json.dumps(result, indent=1) if args.json else format_text(result))
    failed = any("error" in r for row in rows for r in list(row["nfn"].values()) + list(row["pytorch"].values()))
    return 1 if failed or None in result["ratio"].values() else 0


if __name__ == "__main__":
    sys.exit(main())
