"""`nfn eval`: mean loss, perplexity and bits per byte of a checkpoint on a dataset split.

The split's shards are read as one token stream and cut into windows of the model's
context; every position predicts the next token, so each token after the first is scored
once. Bits per byte follow nanochat: the summed loss in nats over the scored tokens,
divided by ln 2 and by the UTF-8 bytes of those tokens' decoded text; end-of-text tokens
count as no bytes and their losses are left out of that one ratio.
"""
import math
import sys

from nfn.errors import UserError


def read_split_tokens(shards, limit, vocab_size, name):
    """The split's tokens as int32, concatenated, at most `limit` (None: all); each shard's ids
    checked against the vocabulary in their own width first (a uint32 id stays itself)."""
    import numpy as np
    from nfn.data import shard_headers
    parts, total = [], 0
    for path in shards:
        ntok, width = shard_headers.read_header(path)
        dtype = np.uint16 if width == 2 else np.uint32
        take = ntok if limit is None else min(ntok, limit - total)
        part = np.fromfile(path, dtype=dtype, count=take, offset=shard_headers.HEADER_BYTES)
        if take and int(part.max()) >= vocab_size:
            raise UserError(f"dataset {name}: token id {int(part.max())} is outside the checkpoint's vocabulary "
                            f"[0, {vocab_size}) (tokenizer mismatch)")
        parts.append(part)
        total += take
        if limit is not None and total >= limit:
            break
    tokens = np.empty(total, dtype=np.int32)  # filled part by part: no wider copy of the split
    at = 0
    for part in parts:
        tokens[at:at + len(part)] = part
        at += len(part)
    return tokens


def dataset_shards(args, tokenizer, data):
    """The split's shard paths for data (("dataset", alias or shards) or ("pretraining_file",
    text)), prepared with the checkpoint's tokenizer if needed; existing shards need only
    that split's."""
    from nfn.data import cache
    kind, name = data
    splits = (args.split,)  # existing shards need only the split read
    info = cache.find_cached(**{kind: name}, tokenizer=tokenizer, splits=splits)
    if info is None:
        from nfn.data.prepare import prepare_dataset
        info = prepare_dataset(**{kind: name}, tokenizer=tokenizer, quiet=args.json, splits=splits)
    if info["tokenizer"] != tokenizer:
        raise UserError(f"dataset {name} is tokenized with {info['tokenizer']} but the checkpoint "
                        f"uses {tokenizer}")
    shards = info["val_shards"] if args.split == "val" else info["train_shards"]
    if not shards:
        raise UserError(f"dataset {name}: no {args.split} shards")
    return shards


def score(engine, tokens, window):
    """Per-token losses (nats) of tokens[1:], in windows of `window` positions."""
    import numpy as np
    losses = []
    for start in range(0, len(tokens) - 1, window):
        end = min(start + window, len(tokens) - 1)
        losses.append(engine.losses(tokens[start:end], tokens[start + 1:end + 1])[0])
    return np.concatenate(losses) if losses else np.zeros(0, dtype=np.float32)


def metrics(losses, targets, tok, eot):
    """loss, perplexity, bits per byte (None without a tokenizer) from per-token losses."""
    import numpy as np
    loss = float(np.mean(losses, dtype=np.float64))
    try:
        perplexity = math.exp(loss)  # NaN stays NaN
    except OverflowError:  # past 709.78 nats
        perplexity = math.inf
    out = {"loss": loss, "perplexity": perplexity, "bits_per_byte": None, "tokens": int(len(losses))}
    if tok is not None:
        keep = targets != eot if eot is not None else np.ones(len(targets), dtype=bool)
        nbytes = len(tok.decode([int(t) for t in targets[keep]]).encode("utf-8"))
        if nbytes:
            out["bits_per_byte"] = float(np.sum(losses[keep], dtype=np.float64)) / (math.log(2) * nbytes)
        out["bytes"] = nbytes
    return out


def run(args):
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UserError(f"--max-tokens must be >= 1 (got {args.max_tokens})")
    from nfn.infer import model as model_lib
    m = model_lib.load(args, need_tokenizer=True)
    if args.dataset == "":
        raise UserError("--dataset: empty (name a dataset alias or a shard directory)")
    data = ("dataset", args.dataset) if args.dataset else m.data
    if data is None:
        raise UserError(f"--dataset is required: {m.source} records no training data (name an alias from "
                        "`nfn data list`, or a shard directory)")
    name = data[1]
    shards = dataset_shards(args, m.tokenizer, data)
    limit = None if args.max_tokens is None else args.max_tokens + 1  # +1: the first token is only context
    tokens = read_split_tokens(shards, limit, m.geometry["vocab_size"], name)
    if len(tokens) < 2:
        raise UserError(f"dataset {name}: the {args.split} split has fewer than 2 tokens")
    from nfn import tokenizers
    tok = tokenizers.load(m.tokenizer, quiet=args.json)
    engine, note = model_lib.start_engine(m, args.backend, threads=getattr(args, "threads", 0), quantize=args.quantize,
                                          context=args.context)
    try:
        losses = score(engine, tokens, engine.max_seq_len)
    except (RuntimeError, ValueError) as e:
        raise UserError(str(e)) from None
    # End-of-text targets count toward neither sum: the manifest's token, else the tokenizer's.
    result = metrics(losses, tokens[1:], tok, m.eot if m.eot is not None else tok.eot_id)
    result.update({"checkpoint": m.source, "dataset": name, "split": args.split,
                   "backend": engine.backend, "backend_note": note})
    if not getattr(args, "no_record", True):
        from nfn.evals import records
        records.append(m.source, "loss", result)
    if args.json:
        import json
        # JSON has no inf or NaN (a diverged model's): null where a number is not finite.
        json.dump({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in result.items()},
                  sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        bpb = "n/a" if result["bits_per_byte"] is None else f"{result['bits_per_byte']:.4f}"
        print(f"{name} {args.split} loss {result['loss']:.4f}   perplexity {result['perplexity']:.2f}   "
              f"bits/byte {bpb}   tokens {result['tokens']}")
    return 0
