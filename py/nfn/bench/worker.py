"""One configuration of `nfn bench infer`, in a process of its own so that its peak memory is
its own: open the engine on the checkpoint (weights format, context, threads, backend), run one
untimed generation, then `repeats` timed ones (of `batch` prompts together where batch > 1), and
print one JSON line with the medians, every run, the engine's weight bytes and the process's
memory.

Started by nfn.bench.infer.run_config (never by a user); its argument is the configuration as
JSON. Memory: VmHWM (peak resident set) and VmRSS from /proc/self/status; on CUDA also the
device memory in use after the runs less what was in use before the engine opened.
"""
import json
import statistics
import sys
import time
from types import SimpleNamespace


def proc_status_bytes(field, path="/proc/self/status"):
    """A `kB` field of /proc/self/status (VmHWM, VmRSS) in bytes; None where there is none."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == field:
                    return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_bytes():
    """The process's peak resident set: VmHWM, else getrusage's ru_maxrss (kB on Linux)."""
    peak = proc_status_bytes("VmHWM")
    if peak is None:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak


def device_used_bytes():
    """Memory in use on CUDA device 0 (total less free, every process's), asked of the driver
    in its primary context (the one the CUDA runtime, and so the op library, uses); None where
    there is no driver or device."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    if (cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0
            or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0):
        return None
    try:
        if cuda.cuCtxPushCurrent_v2(ctx) != 0:
            return None
        ok = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        return total.value - free.value if ok else None
    finally:
        cuda.cuDevicePrimaryCtxRelease_v2(dev)


def measure(cfg):
    """The configuration's result: a dict for one row of the table."""
    from nfn.bench.infer import batch_prompts
    from nfn.infer import model as infer_model

    quantize = "" if cfg["weights"] == "f32" else cfg["weights"]
    spec = SimpleNamespace(checkpoint=cfg["checkpoint"], weights=None, graph_file=None, tokenizer=None)
    loaded = infer_model.load(spec, need_tokenizer=False)
    base_rss = proc_status_bytes("VmRSS")
    device_before = device_used_bytes() if cfg["backend"] == "cuda" else None
    t0 = time.perf_counter()
    engine, _ = infer_model.start_engine(loaded, backend=cfg["backend"], threads=cfg["threads"], quantize=quantize,
                                         context=cfg["context"])
    load_seconds = time.perf_counter() - t0
    batch = cfg.get("batch", 1)
    prompts = batch_prompts(batch, cfg["prompt_tokens"], loaded.geometry["vocab_size"], cfg["seed"])
    prompt = prompts[0]
    n = cfg["new_tokens"]

    def generate(count):
        """(prefill tok/s, decode tok/s or None, the first sequence's tokens) of one greedy run."""
        if batch == 1:
            r = engine.generate(prompt, count, temperature=0)
            # count tokens take count - 1 forwards through the cache: the first comes from the prefill's logits.
            fed, seqs = len(r["tokens"]) - 1, [r]
        else:
            r = engine.generate_batch(prompts, count, temperature=0)
            fed, seqs = r["decoded_tokens"], r["sequences"]
        rate = fed / r["decode_seconds"] if fed > 0 else None
        return batch * len(prompt) / r["prefill_seconds"], rate, seqs[0]["tokens"]
    t0 = time.perf_counter()
    generate(min(n, 2))  # untimed: first touches, GEMM set-up at these shapes
    warmup_seconds = time.perf_counter() - t0
    prefill, decode, tokens = [], [], None
    for _ in range(cfg["repeats"]):
        p, d, tokens = generate(n)
        prefill.append(p)
        if d is not None:
            decode.append(d)
    device_after = device_used_bytes() if cfg["backend"] == "cuda" else None
    end_rss = proc_status_bytes("VmRSS")
    return {
        "weights": cfg["weights"], "batch": batch, "prompt_tokens": len(prompt), "new_tokens": n,
        "backend": engine.backend, "matmul": engine.matmul, "context": engine.max_seq_len, "weight_bytes": engine.weight_bytes,
        "load_seconds": load_seconds, "warmup_seconds": warmup_seconds,
        "prefill_tokens_per_second": statistics.median(prefill),
        "decode_tokens_per_second": statistics.median(decode) if decode else None,
        "prefill_runs": prefill, "decode_runs": decode,
        # The kernel updates VmHWM lazily: a VmRSS read just before can exceed it.
        "peak_rss_bytes": max(peak_rss_bytes(), end_rss or 0), "end_rss_bytes": end_rss, "base_rss_bytes": base_rss,
        "device_bytes": device_after - device_before if None not in (device_before, device_after) else None,
        "greedy_tokens": tokens,
    }


def main(argv):
    """Measures the configuration argv[0] (JSON) and prints its row as one JSON line."""
    from nfn.errors import UserError
    cfg = json.loads(argv[0])
    try:
        result = measure(cfg)
    except UserError as e:
        result = {"weights": cfg["weights"], "batch": cfg.get("batch", 1), "prompt_tokens": cfg["prompt_tokens"],
                  "error": str(e)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
