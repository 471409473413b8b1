#!/usr/bin/env python3
"""Items per second of `nfn eval --tasks hellaswag` against a PyTorch CPU reference, in one run.

Both sides score the same items of a CORE multiple-choice task (default: HellaSwag 10-shot,
the first --items of its fixed order) with the same model (default: the `smollm2` artifact,
SmolLM2-135M-Instruct from `nfn import`) in f32 with the same thread count:

- nfn: the `nfn eval --tasks TASK --max-per-task N --json` command, timed by the scoring time it
  reports (model loading excluded). Its engine shares each item's context between the choices
  when it has truncate(position); without it each choice runs whole.
- PyTorch: a llama written here, as nanochat's core_eval.py scores an item: the choices' token
  lists padded into one batch, one forward, the mean loss of each continuation.

Each side runs --repeats times and the medians are compared; "ratio" is nfn / PyTorch items per
second. The two sides' mean losses of every item are compared as a check that they scored the
same model on the same tokens. The CPU model, thread count and load averages are printed: on a
shared machine, compare medians of runs made together.

    bazel build -c opt //py:nfn_native //cc/bin:nfn_native_train
    nfn import --gguf .../SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2
    python3 tools/bench_eval.py --items 4 --repeats 3 --threads 1

PyTorch is a reference here only; nfn never imports it.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="smollm2", help="a llama checkpoint (artifact name or path)")
    p.add_argument("--task", default="hellaswag", help="a CORE multiple-choice task id (default hellaswag)")
    p.add_argument("--items", type=int, default=4, help="items scored a repeat (default 4)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="CPU threads of both sides (default 1)")
    p.add_argument("--context", type=int, default=2048, help="positions nfn's KV cache holds (default 2048)")
    p.add_argument("--native-dir", default=os.path.join(ROOT, "bazel-bin", "py", "nfn"),
                   help="directory holding the built nfn/_native.so")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "bazel-bin", "cc", "bin"),
                   help="directory holding nfn_native_train (the checkpoint query)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


BOOT = "import sys, nfn; nfn.__path__.append(sys.argv[1]); from nfn.cli.main import main; sys.exit(main(sys.argv[2:]))"


def import_nfn(native_dir):
    sys.path.insert(0, os.path.join(ROOT, "py"))
    import nfn
    nfn.__path__.append(native_dir)
    return nfn


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nfn_run(args, env):
    """(seconds scoring, accuracy) of one `nfn eval` command."""
    argv = ["eval", "--checkpoint", args.checkpoint, "--tasks", args.task, "--max-per-task", str(args.items),
            "--threads", str(args.threads), "--context", str(args.context), "--backend", "cpu", "--no-record",
            "--json"]
    proc = subprocess.run([sys.executable, "-c", BOOT, args.native_dir] + argv, capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        sys.exit(f"bench_eval: nfn eval failed: {proc.stderr.strip()}")
    result = json.loads(proc.stdout)["tasks"][args.task]
    return result["seconds"], result["accuracy"]


class TorchLlama:
    """A llama's forward in f32 from the checkpoint's tensors: RMSNorm, rotary over halves,
    grouped-query attention, SwiGLU, tied or separate head."""

    def __init__(self, path, threads):
        import torch
        from safetensors import safe_open
        torch.set_num_threads(threads)
        with safe_open(path, framework="np") as f:
            meta = f.metadata()
            self.w = {k: torch.from_numpy(f.get_tensor(k).astype("float32")) for k in f.keys()}
        if meta.get("model_family") != "llama":
            sys.exit(f"bench_eval: {path} is a {meta.get('model_family')} checkpoint; the reference is a llama")
        g = json.loads(meta["geometry"])
        self.L, self.NH, self.NKV, self.HD = g["num_layers"], g["num_heads"], g["num_kv_heads"], g["head_dim"]
        self.eps, self.theta, self.V = g.get("norm_eps", 1e-5), g["rope_theta"], g["vocab_size"]
        self.head = self.w["model.embed_tokens.weight"] if g["tied_head"] else self.w["lm_head.weight"]
        inv = 1.0 / self.theta ** (torch.arange(0, self.HD, 2, dtype=torch.float64) / self.HD)
        ang = torch.outer(torch.arange(g["max_seq_len"], dtype=torch.float64), inv)
        self.cos, self.sin = ang.cos().float(), ang.sin().float()

    def rms(self, x, w):
        import torch
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rotary(self, x):
        T, half = x.shape[2], self.HD // 2
        cos, sin = self.cos[:T], self.sin[:T]
        x1, x2 = x[..., :half], x[..., half:]
        import torch
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def logits(self, ids):
        """ids (B, T) int64 -> logits (B, T, V)."""
        import torch
        import torch.nn.functional as F
        B, T = ids.shape
        w = self.w
        x = w["model.embed_tokens.weight"][ids]
        for i in range(self.L):
            pre = f"model.layers.{i}."
            h = self.rms(x, w[pre + "input_layernorm.weight"])
            q = (h @ w[pre + "self_attn.q_proj.weight"].T).view(B, T, self.NH, self.HD).transpose(1, 2)
            k = (h @ w[pre + "self_attn.k_proj.weight"].T).view(B, T, self.NKV, self.HD).transpose(1, 2)
            v = (h @ w[pre + "self_attn.v_proj.weight"].T).view(B, T, self.NKV, self.HD).transpose(1, 2)
            q, k = self.rotary(q), self.rotary(k)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + y.transpose(1, 2).reshape(B, T, -1) @ w[pre + "self_attn.o_proj.weight"].T
            h = self.rms(x, w[pre + "post_attention_layernorm.weight"])
            x = x + (F.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * (h @ w[pre + "mlp.up_proj.weight"].T)) \
                @ w[pre + "mlp.down_proj.weight"].T
        return self.rms(x, w["model.norm.weight"]) @ self.head[:self.V].T

    def mean_losses(self, tokens, starts, ends):
        """nanochat's forward_model: the choices in one padded batch, each continuation's mean loss."""
        import torch
        import torch.nn.functional as F
        width = max(len(t) for t in tokens)
        ids = torch.zeros(len(tokens), width, dtype=torch.long)
        for i, t in enumerate(tokens):
            ids[i, :len(t)] = torch.tensor(t)
        with torch.no_grad():
            logits = self.logits(ids)
            losses = F.cross_entropy(logits[:, :-1].reshape(-1, self.V), ids[:, 1:].reshape(-1),
                                     reduction="none").view(len(tokens), width - 1)
        return [float(losses[i, s - 1:e - 1].mean()) for i, (s, e) in enumerate(zip(starts, ends))]


def main(argv=None):
    args = parse_args(argv)
    import_nfn(args.native_dir)
    from nfn import tokenizers
    from nfn.errors import UserError
    from nfn.evals import core, scoring, suite
    from nfn.infer import model as model_lib
    os.environ.setdefault("NFN_NATIVE_BIN_DIR", args.bin_dir)
    task = suite.TASKS.get(args.task)
    if not isinstance(task, core.CoreTask) or task.kind != "multiple_choice":
        sys.exit(f"bench_eval: --task must be a CORE multiple-choice task, got {args.task!r}")

    class Load:
        checkpoint, weights, graph_file, tokenizer = args.checkpoint, None, None, None
    try:
        m = model_lib.load(Load())
    except UserError as e:
        sys.exit(f"bench_eval: {e} (import SmolLM2 first: nfn import --gguf FILE --name smollm2)")
    if m.family != "llama":
        sys.exit(f"bench_eval: {m.source} is a {m.family} checkpoint; the reference is a llama")
    tok = tokenizers.load(m.tokenizer, quiet=True)
    items = task.load()
    indices = suite.order(len(items), args.items)
    start = core.document_start(tok)
    batches = []
    for index in indices:
        prompts = core.render(task.kind, items[index], core.fewshot(items, index, task.shots), task.delimiter)
        batches.append((index, *core.sequences(task.kind, tok, prompts, start)))
    tokens_a_repeat = sum(len(t) for _, seqs, _, _ in batches for t in seqs)

    # nfn's own losses of each item (untimed), to hold the reference to.
    engine, _ = model_lib.start_engine(m, "cpu", threads=args.threads, context=args.context)
    cache = scoring.PrefixCache(engine)
    nfn_losses = [scoring.mean_losses(cache, seqs, s, e) for _, seqs, s, e in batches]
    shared_prefill = cache.can_truncate
    del cache, engine

    load_before = os.getloadavg()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "py"))
    nfn_times, nfn_accuracy = [], None
    torch_times, torch_correct = [], 0
    ref = TorchLlama(m.source, args.threads)
    torch_losses = None
    for _ in range(args.repeats):  # interleaved, so both sides see the same load
        seconds, nfn_accuracy = nfn_run(args, env)
        nfn_times.append(seconds)
        started = time.perf_counter()
        torch_losses = [ref.mean_losses(seqs, s, e) for _, seqs, s, e in batches]
        torch_times.append(time.perf_counter() - started)
    torch_correct = sum(int(l.index(min(l)) == items[i]["gold"]) for (i, _, _, _), l in zip(batches, torch_losses))
    diff = max(abs(a - b) for la, lb in zip(nfn_losses, torch_losses) for a, b in zip(la, lb))
    nfn_rate = args.items / statistics.median(nfn_times)
    torch_rate = args.items / statistics.median(torch_times)
    out = {
        "cpu": cpu_model(), "threads": args.threads, "task": args.task, "shots": task.shots, "items": args.items,
        "tokens_a_repeat": tokens_a_repeat, "repeats": args.repeats, "shared_prefill": shared_prefill,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "nfn_seconds": [round(t, 3) for t in nfn_times], "torch_seconds": [round(t, 3) for t in torch_times],
        "nfn_accuracy": nfn_accuracy, "torch_accuracy": torch_correct / args.items,
        "max_mean_loss_difference": diff,
        "nfn_items_per_second": nfn_rate, "torch_items_per_second": torch_rate, "ratio": nfn_rate / torch_rate,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"cpu: {out['cpu']}, {args.threads} thread(s); load average {out['load_average_before']} -> "
          f"{out['load_average_after']}")
    print(f"{args.task} ({task.shots}-shot): {args.items} items, {tokens_a_repeat} tokens in their choices; "
          f"nfn shares each item's context: {'yes (truncate)' if shared_prefill else 'no (engine lacks truncate)'}")
    print(f"accuracy: nfn {nfn_accuracy:.3f}, PyTorch {out['torch_accuracy']:.3f}; "
          f"largest mean-loss difference {diff:.2e} nats")
    print(f"{'side':<8} {'median s':>9} {'items/s':>8}   runs (s)")
    print(f"{'nfn':<8} {statistics.median(nfn_times):>9.2f} {nfn_rate:>8.3f}   {out['nfn_seconds']}")
    print(f"{'PyTorch':<8} {statistics.median(torch_times):>9.2f} {torch_rate:>8.3f}   {out['torch_seconds']}")
    print(f"ratio (nfn / PyTorch items per second): {out['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
