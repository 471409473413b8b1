"""Encode text pieces on every core, in order, with bounded memory.

Worker processes are forked after the tokenizer is loaded, so each inherits it instead of
rebuilding it; one piece a worker is in flight, so any input size streams.
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


def _serve(conn, parent_ends):
    """A worker: encode each (doc_start, text) it is sent and send back ("ok", ids) or
    ("error", message), until it is sent None or the parent is gone."""
    # Ctrl-C goes to the whole process group: the parent alone handles it, and kills the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The parent's ends of the pipes, inherited through fork: closed, so that a parent killed
    # outright (SIGKILL, out of memory) leaves this pipe with no other end and the worker exits,
    # letting go of what it inherited too (the dataset's build lock among it).
    for end in parent_ends:
        end.close()
    try:
        while True:
            job = conn.recv()
            if job is None:
                return
            try:
                conn.send(("ok", _encode(*job)))
            except ValueError as e:
                conn.send(("error", str(e)))
    except (EOFError, OSError):  # the parent is gone
        return


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
        yield from _encode_on_workers(pieces, workers)
    except ValueError as e:
        raise UserError(str(e)) from None


def _encode_on_workers(pieces, workers):
    """Pieces dealt round robin to forked workers, each with a pipe of its own, one piece a
    worker in flight, results taken back in order. No lock is shared between the processes
    (multiprocessing.Pool's task queue had one: a Ctrl-C could leave its terminate() waiting
    forever on a lock a worker held), so an interrupt just kills the workers."""
    ctx = multiprocessing.get_context("fork")
    conns, procs = [], []
    try:
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, conns + [parent]), daemon=True)
            proc.start()
            child.close()
            conns.append(parent)
            procs.append(proc)
        inflight = collections.deque()  # (split, doc_start, nbytes, worker), oldest first
        for i, (split, doc_start, text, nbytes) in enumerate(pieces):
            w = i % workers
            if len(inflight) == workers:  # the oldest is worker w's: take it before w's next piece
                yield _result(inflight.popleft(), conns)
            conns[w].send((doc_start, text))
            inflight.append((split, doc_start, nbytes, w))
        while inflight:
            yield _result(inflight.popleft(), conns)
        for conn in conns:
            conn.send(None)
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in conns:
            conn.close()


def _result(item, conns):
    split, doc_start, nbytes, w = item
    try:
        status, value = conns[w].recv()
    except EOFError:
        raise UserError("a tokenizer worker process died (out of memory?)") from None
    if status == "error":
        raise ValueError(value)
    return split, doc_start, nbytes, value
