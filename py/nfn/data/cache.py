"""The prepared-dataset cache, answered from meta.json and file sizes alone (standard library).

<datasets dir>/<key>/ holds <name>_{train,val}_NNNNNN.bin and meta.json, which lists the
shards by file name, so an entry whose shards are named otherwise (fineweb_*) reads the same.
An entry is a hit only when its meta matches the source identity (alias, or each input file's
path, size and mtime) and the tokenizer's file hash, and every shard has exactly the size its
token count implies. The trainer's dispatch path calls find_cached; it imports neither numpy nor nfn._native.
"""
import json
import os

from nfn import paths
from nfn.data import shard_headers
from nfn.data.resolve import SPLITS, resolve

META_FILE = "meta.json"
META_SCHEMA = 1


def entry_dir(key):
    return os.path.join(paths.datasets_dir(), key)


def shard_summary(src):
    """The result dict for existing shards: headers validated, counts from headers."""
    from nfn import tokenizers
    counts = {}
    widths = set()
    for split, files in (("train", src.train), ("val", src.val)):
        total = 0
        for path in files:
            ntok, width = shard_headers.read_header(path)
            total += ntok
            widths.add(width)
        counts[split] = total
    return {
        "dataset": src.dataset,
        "tokenizer": src.tokenizer,
        "dir": os.path.dirname(os.path.abspath((src.train or src.val)[0])),
        "train_shards": [os.path.abspath(p) for p in src.train],
        "val_shards": [os.path.abspath(p) for p in src.val],
        "train_tokens": counts["train"],
        "val_tokens": counts["val"],
        "vocab_size": tokenizers.vocab_size_of(src.tokenizer),
        "token_bytes": max(widths),
        "meta": None,
        "cached": True,
    }


def read_meta(directory):
    try:
        with open(os.path.join(directory, META_FILE), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("schema") == META_SCHEMA else None


def summary_from_meta(directory, meta):
    """The result dict of a cache entry, or None when any shard is missing or the wrong size."""
    out = {}
    width = meta["token_bytes"]
    for split in ("train", "val"):
        files, total = [], 0
        for shard in meta["splits"][split]["shards"]:
            path = os.path.join(directory, shard["file"])
            try:
                size = os.path.getsize(path)
            except OSError:
                return None
            if size != shard_headers.HEADER_BYTES + width * shard["tokens"]:
                return None
            files.append(path)
            total += shard["tokens"]
        out[split] = (files, total)
    return {
        "dataset": meta["dataset"],
        "tokenizer": meta["tokenizer"]["name"],
        "dir": directory,
        "train_shards": out["train"][0],
        "val_shards": out["val"][0],
        "train_tokens": out["train"][1],
        "val_tokens": out["val"][1],
        "vocab_size": meta["vocab_size"],
        "token_bytes": width,
        "meta": os.path.join(directory, META_FILE),
        "cached": True,
    }


def cached_text_entry(src):
    """The summary of src's cache entry if it is valid for the current tokenizer files."""
    from nfn import tokenizers
    directory = entry_dir(src.key)
    meta = read_meta(directory)
    if meta is None or meta.get("source") != src.identity:
        return None
    current = tokenizers.fingerprint(src.tokenizer)
    if current is None or meta.get("tokenizer", {}).get("sha256") != current:
        return None
    try:
        return summary_from_meta(directory, meta)
    except (KeyError, TypeError):
        return None


def find_cached(dataset=None, pretraining_file=None, tokenizer="gpt2", splits=SPLITS):
    """The prepared dataset if nothing needs tokenizing, else None. Bad input raises UserError.
    splits: those existing shards must have (resolve)."""
    src = resolve(dataset, pretraining_file, tokenizer, splits)
    if src.kind == "shards":
        return shard_summary(src)
    return cached_text_entry(src)


def cached_entries():
    """{dataset name: [tokenizer, ...]} of every cache entry with a readable meta.json."""
    root = paths.datasets_dir()
    found = {}
    if not os.path.isdir(root):
        return found
    for key in sorted(os.listdir(root)):
        meta = read_meta(os.path.join(root, key)) if not key.startswith(".") else None
        if meta:
            found.setdefault(meta["dataset"], []).append(meta["tokenizer"]["name"])
    return found
