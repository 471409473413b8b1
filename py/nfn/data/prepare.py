"""nfn data prepare: resolve a source, tokenize it on every core, write cached shards atomically.

    prepare_dataset(dataset="shakespeare", tokenizer="gpt2") -> {"dataset", "tokenizer", "dir",
        "train_shards", "val_shards", "train_tokens", "val_tokens", "vocab_size", ...}

Each document starts with the tokenizer's eot id (llm.c's layout). The entry is built in a
temp directory beside its final place and renamed there only when complete; a stale entry
is replaced in one step (fileio.install_dir), so readers never see half a dataset, nor none.
One process builds an entry at a time: another prepare of it waits, then finds it built.
"""
import contextlib
import datetime
import json
import os
import sys

import numpy as np

from nfn import fileio, paths, tokenizers
from nfn.data import cache, shard_headers, sources
from nfn.data.parallel_encode import encode_stream
from nfn.data.progress import Progress
from nfn.data.resolve import SPLITS, resolve
from nfn.data.shard_writer import DEFAULT_SHARD_TOKENS, ShardWriter, shard_prefix
from nfn.data.text_pieces import explicit_pieces, split_pieces, split_stream, total_bytes
from nfn.errors import UserError

VAL_FRACTION = 0.1
VAL_MAX_BYTES = 50 << 20  # ~12M GPT-2 tokens: plenty for a loss estimate on any corpus


def _writable_tmp(root, key):
    """The entry's work directory (fileio.WorkDir), once the cache's killed writers' are gone."""
    try:
        os.makedirs(root, exist_ok=True)
        return fileio.WorkDir(root, "tmp", key)
    except OSError as e:
        raise UserError(f"{root}: dataset cache is not writable ({e.strerror}); "
                        f"set {paths.DATASETS_ENV} to a writable directory") from None


def _install(tmp, final):
    """Rename tmp to final, replacing an older entry in one step (fileio.install_dir)."""
    fileio.install_dir(tmp, final)


@contextlib.contextmanager
def _one_builder(root, src, quiet):
    """Held while this process builds src's entry, so that another prepare of it (a second
    `nfn data prepare`, `nfn train` or `nfn eval`, or a reader that missed the entry while it
    was being replaced) waits here, with a notice unless quiet, and then finds it built.

    A flock on root/.nfn-lock-KEY (opened read-only, so any user of a shared cache can take
    it); the holder removes the file before letting go, and a waiter that then holds a file no
    longer there starts again. One a killed builder left is free to take, and removed as other
    unfinished work is (fileio)."""
    import fcntl
    path = os.path.join(root, f"{fileio.WORK_PREFIX}lock-{src.key}")
    said = quiet
    while True:
        try:
            os.makedirs(root, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise UserError(f"{root}: dataset cache is not writable ({e.strerror}); "
                            f"set {paths.DATASETS_ENV} to a writable directory") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    print(f"nfn: waiting for another process preparing {src.dataset} with {src.tokenizer}",
                          file=sys.stderr, flush=True)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it as it let go: take the file there now
                continue
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.remove(path)
            return
        finally:
            os.close(fd)


def _check_token_range(summary):
    """Existing shards: every id of the val shard and the first train shard must fit the tokenizer."""
    vocab = summary["vocab_size"]
    for path in summary["val_shards"][:1] + summary["train_shards"][:1]:
        ntok, width = shard_headers.read_header(path)
        ids = np.memmap(path, dtype="<u2" if width == 2 else "<u4", mode="r", offset=1024, shape=(ntok,))
        if ntok and int(ids.max()) >= vocab:
            where = int(np.argmax(ids >= vocab))
            raise UserError(f"{path}: token id {int(ids[where])} at token {where} is out of range for "
                            f"tokenizer {summary['tokenizer']} (vocab size {vocab})")


def _seq_len_hints(doc_tokens):
    if not doc_tokens:
        return {}
    d = np.asarray(doc_tokens)
    return {"documents": int(d.size), "mean_document_tokens": float(d.mean()),
            "p50_document_tokens": int(np.percentile(d, 50)), "p90_document_tokens": int(np.percentile(d, 90)),
            "max_document_tokens": int(d.max())}


def _pieces_for(src, quiet):
    """(pieces iterator, input files, total bytes) of a text source."""
    if src.text_alias == "tinystories":
        from nfn.data.download import ensure_tinystories
        files = ensure_tinystories(quiet)
        inputs = [files["train"], files["val"]]
        return explicit_pieces([files["train"]], [files["val"]]), inputs, total_bytes(inputs)
    if src.text_column:  # Parquet rows
        from nfn.data import parquet_text
        size = parquet_text.text_bytes(src.files)
        pieces = (p for path in src.files for p in parquet_text.document_pieces(path, src.text_column))
        return split_stream(pieces, min(int(size * VAL_FRACTION), VAL_MAX_BYTES)), src.files, size
    files = sources.text_files(src.text_alias, quiet) if src.text_alias else src.files
    size = total_bytes(files)
    return split_pieces(files, min(int(size * VAL_FRACTION), VAL_MAX_BYTES)), files, size


def _build(src, tok, quiet, shard_tokens, workers):
    root = paths.datasets_dir()
    final = cache.entry_dir(src.key)
    fileio.remove_orphaned_dirs(root, quiet)
    with _writable_tmp(root, src.key) as work:
        tmp = work.path
        pieces, inputs, size = _pieces_for(src, quiet)
        vocab = tok.vocab_size
        width = shard_headers.token_bytes_for_vocab(vocab)
        prefix = shard_prefix(src.dataset)
        writers = {s: ShardWriter(tmp, prefix, s, width, shard_tokens) for s in ("train", "val")}
        doc_tokens = []
        progress = Progress(f"prepare {src.dataset} ({tok.name})", size, enabled=not quiet)
        for split, doc_start, nbytes, ids in encode_stream(tok, pieces, writers["train"].dtype, workers):
            writers[split].add(ids)
            if doc_start or not doc_tokens:
                doc_tokens.append(0)
            doc_tokens[-1] += len(ids)
            progress.update(nbytes, len(ids))
        progress.close()
        splits = {}
        for split, writer in writers.items():
            shards = writer.close()
            splits[split] = {"tokens": sum(s["tokens"] for s in shards), "shards": shards}
        where = src.files[0] if len(src.files) == 1 else src.dataset
        if splits["train"]["tokens"] + splits["val"]["tokens"] == 0:
            raise UserError(f"{where}: empty text, nothing to tokenize")
        for split in ("train", "val"):
            if splits[split]["tokens"] == 0:
                # Validation takes the text's start up to a line end past its share (on one line,
                # a word's end); without one there it takes everything.
                raise UserError(f"{where}: text too short to split into train and validation ({size} bytes), "
                                "or with no line or word end after its first part to cut at")
        meta = {
            "schema": cache.META_SCHEMA,
            "dataset": src.dataset,
            "source": src.identity,
            "inputs": inputs,
            "tokenizer": tok.identity(),
            "vocab_size": vocab,
            "eot_id": tok.eot_id,
            "token_bytes": width,
            "text_bytes": size,
            "splits": splits,
            "seq_len_hints": _seq_len_hints(doc_tokens),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        with open(os.path.join(tmp, cache.META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        _install(tmp, final)
    return cache.summary_from_meta(final, meta)


def prepare_dataset(dataset=None, pretraining_file=None, tokenizer="gpt2", quiet=False,
                    shard_tokens=DEFAULT_SHARD_TOKENS, workers=None, splits=SPLITS, parquet=None, text_column="text"):
    """The prepared dataset (keys as `nfn data prepare --json`), tokenizing only when not cached.
    splits: those existing shards must have (resolve); text is prepared into both."""
    if shard_tokens < 1:
        raise UserError(f"--shard-tokens must be positive, got {shard_tokens}")
    src = resolve(dataset, pretraining_file, tokenizer, splits, parquet, text_column)
    if src.kind == "shards":
        summary = cache.shard_summary(src)
        _check_token_range(summary)
        return summary
    hit = cache.cached_text_entry(src)
    if hit:
        return hit
    tok = tokenizers.load(tokenizer, quiet)  # may train an sp model, after which the cache can hit
    with _one_builder(paths.datasets_dir(), src, quiet):
        hit = cache.cached_text_entry(src)  # the tokenizer's training, or another builder, made it
        if hit:
            return hit
        summary = _build(src, tok, quiet, shard_tokens, workers)
    summary["cached"] = False
    return summary
