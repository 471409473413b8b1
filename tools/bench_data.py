#!/usr/bin/env python3
"""Shard-building throughput: `nfn data prepare` against a plain single-process tiktoken loop.

    tools/bench_data.py [--pretraining-file PATH] [--repeat N] [--workers N] [--json]

Both sides tokenize the same text (default: the shakespeare corpus, repeated N times into a
temp directory) with GPT-2 and write llm.c shards; the tokenizer is loaded before timing.
The last line (JSON key "ratio") is prepare's tokens/s over the baseline's. A benchmark, not a test.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))


def baseline(files, out_dir, enc, eot):
    """What a first script would do: read each file, encode it whole, write one shard."""
    import numpy as np
    from nfn.data.shard_headers import header_bytes
    tokens = []
    for path in files:
        with open(path, encoding="utf-8", newline="") as f:  # the bytes' line ends, as prepare reads them
            tokens.append(eot)
            tokens.extend(enc.encode_ordinary(f.read()))
    arr = np.asarray(tokens, dtype="<u2")
    with open(os.path.join(out_dir, "baseline_train_000000.bin"), "wb") as f:
        f.write(header_bytes(len(arr), 2) + arr.tobytes())
    return arr


def shard_tokens(paths):
    import numpy as np
    from nfn.data.shard_headers import HEADER_BYTES
    return np.concatenate([np.fromfile(p, dtype="<u2", offset=HEADER_BYTES) for p in paths])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pretraining-file", help="a UTF-8 file or directory of .txt files (default: shakespeare)")
    ap.add_argument("--repeat", type=int, default=4, help="copies of the corpus to tokenize (default 4)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from nfn.data import prepare, resolve, sources
    from nfn.tokenizers.gpt2 import gpt2_encoding

    work = tempfile.mkdtemp(prefix="nfn-bench-data-")
    try:
        src_files = (resolve.text_files_of(os.path.abspath(args.pretraining_file)) if args.pretraining_file
                     else sources.text_files("shakespeare", quiet=True))
        corpus = os.path.join(work, "corpus")
        os.mkdir(corpus)
        files = []
        for r in range(args.repeat):
            for i, path in enumerate(src_files):
                dst = os.path.join(corpus, f"{r:03d}_{i:05d}.txt")
                shutil.copyfile(path, dst)
                files.append(dst)
        text_bytes = sum(os.path.getsize(f) for f in files)
        enc = gpt2_encoding()  # load once, outside both timings

        t = time.perf_counter()
        base = baseline(files, work, enc, enc.eot_token)
        base_s = time.perf_counter() - t
        base_tokens = len(base)

        os.environ["NFN_DATASETS_DIR"] = os.path.join(work, "datasets")
        t = time.perf_counter()
        result = prepare.prepare_dataset(pretraining_file=corpus, quiet=True, workers=args.workers)
        prep_s = time.perf_counter() - t
        prep_tokens = result["train_tokens"] + result["val_tokens"]
        # The validation split is the text's first share: val then train is the whole stream.
        prepared = shard_tokens(result["val_shards"] + result["train_shards"])
        same_tokens = len(prepared) == len(base) and bool((prepared == base).all())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    from nfn.data.parallel_encode import default_workers
    report = {
        "text_mb": round(text_bytes / 1e6, 2),
        "cores": default_workers(),
        "workers": args.workers or default_workers(),
        "baseline_tokens": base_tokens,
        "baseline_s": round(base_s, 3),
        "baseline_tokens_per_s": round(base_tokens / base_s),
        "prepare_tokens": prep_tokens,
        "prepare_s": round(prep_s, 3),
        "prepare_tokens_per_s": round(prep_tokens / prep_s),
        "same_tokens": same_tokens,
    }
    # Rates of different work are no ratio (a corpus with <|endoftext|> markers, which prepare
    # splits documents at and the baseline encodes as text).
    report["ratio"] = (round(report["prepare_tokens_per_s"] / report["baseline_tokens_per_s"], 3)
                       if same_tokens else None)
    if not same_tokens:
        report["error"] = "the two sides made different tokens: no ratio"
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:<22} {v}")
    return 0 if same_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
