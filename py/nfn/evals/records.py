"""evals.jsonl: the scores `nfn eval` measured on a checkpoint, kept beside it for `nfn report`.

One JSON object a line, appended: {"time", "kind": "tasks" | "loss", "checkpoint", ...the result}.
A checkpoint directory (one with a manifest.json: a training run's or an imported model's) gets
them; a loose model file does not. Appending a line is one write of the whole line, so a killed
evaluation leaves at most one torn last line, which reading skips.
"""
import datetime
import json
import math
import os
import sys

FILE = "evals.jsonl"


def directory_of(source):
    """The checkpoint directory that keeps the records of a model at `source`, or None."""
    directory = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
    return directory if os.path.isfile(os.path.join(directory, "manifest.json")) else None


def finite(value):
    """JSON has no inf or NaN: null where a number is not finite, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def append(source, kind, result):
    """Appends the result for the model at `source`; says so on stderr where it cannot."""
    directory = directory_of(source)
    if directory is None:
        return None
    entry = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "kind": kind,
             **finite(result)}
    path = os.path.join(directory, FILE)
    line = (json.dumps(entry, allow_nan=False) + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as e:
        print(f"nfn eval: warning: scores not recorded in {path}: {e.strerror}", file=sys.stderr)
        return None
    return path


def read_jsonl(path):
    """The JSON objects of a JSONL file (evals.jsonl, a run's log.jsonl), oldest first: a torn or
    non-object line is skipped, a missing file is empty."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    out.append(entry)
    except FileNotFoundError:
        pass
    return out


def read(directory):
    """The records of a checkpoint directory, oldest first (unreadable lines skipped)."""
    return read_jsonl(os.path.join(directory, FILE))
