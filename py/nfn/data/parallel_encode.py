"""Encode text pieces on every core, in order, with bounded memory.

Worker processes are forked after the tokenizer is loaded, so each inherits it instead of
rebuilding it; at most 2 pieces per worker are in flight, so any input size streams.
"""
import collections
import multiprocessing
import os
import signal

import numpy as np

from nfn.errors import UserError

_tokenizer = None
_dtype = None


def _encode(doc_start, text):
    ids = _tokenizer.encode(text)
    start = 1 if doc_start else 0
    arr = np.empty(len(ids) + start, dtype=_dtype)
    if doc_start:
        arr[0] = _tokenizer.eot_id  # every document starts with the separator, as in llm.c
    try:
        arr[start:] = ids
    except OverflowError:
        arr = np.asarray(ids, dtype=np.int64)
    if arr.size and int(arr.max()) >= _tokenizer.vocab_size or (arr.size and int(arr.min()) < 0):
        bad = int(arr.max()) if int(arr.max()) >= _tokenizer.vocab_size else int(arr.min())
        raise ValueError(f"tokenizer {_tokenizer.name} produced id {bad}, outside its vocab of {_tokenizer.vocab_size}")
    return arr


def _worker_start():
    # Ctrl-C goes to the whole process group: the parent alone handles it, and ends the pool.
    # A worker killed by it mid-result left the pool's pipe half-written, and the parent
    # then hung in terminate() or died in a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def encode_stream(tokenizer, pieces, dtype, workers=None):
    """Yield (split, doc_start, nbytes, ids array) for each (split, doc_start, text, nbytes) piece, in order."""
    global _tokenizer, _dtype
    _tokenizer, _dtype = tokenizer, dtype
    workers = workers or default_workers()
    try:
        if workers <= 1:
            for split, doc_start, text, nbytes in pieces:
                yield split, doc_start, nbytes, _encode(doc_start, text)
            return
        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_start) as pool:
            inflight = collections.deque()
            for split, doc_start, text, nbytes in pieces:
                inflight.append((split, doc_start, nbytes, pool.apply_async(_encode, (doc_start, text))))
                if len(inflight) >= 2 * workers:
                    s, d, n, result = inflight.popleft()
                    yield s, d, n, result.get()
            while inflight:
                s, d, n, result = inflight.popleft()
                yield s, d, n, result.get()
    except ValueError as e:
        raise UserError(str(e)) from None
