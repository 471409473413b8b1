"""The native binary `nfn` runs: where it is, and how to ask it a question.

`nfn train` runs the trainer through it; `nfn infer` and `nfn eval` ask it about checkpoints
(`--inspect-checkpoint`, `--inspect-geometry`: cc/train/checkpoint_query.h), so that what the
trainer decides is decided there alone.
Standard library only.
"""
import json
import os
import subprocess

from nfn.errors import UserError

BINARY_ENV = "NFN_NATIVE_BIN_DIR"
DISPATCHER = "nfn_native_train"


def trainer_binary():
    """The dispatcher binary: $NFN_NATIVE_BIN_DIR, else Bazel's runfiles beside this package."""
    candidates = []
    if os.environ.get(BINARY_ENV):
        candidates.append(os.path.join(os.environ[BINARY_ENV], DISPATCHER))
    # <runfiles>/nfn/py/nfn/native_bin.py -> <runfiles>/nfn/cc/bin/
    workspace = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates.append(os.path.join(workspace, "cc", "bin", DISPATCHER))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise UserError(f"the native trainer {DISPATCHER} is not built; run through `bazel run //py:nfn` "
                    f"or point ${BINARY_ENV} at a directory holding it")


def ask(args):
    """The JSON object the binary prints for a query; its one-line error as a UserError."""
    proc = subprocess.run([trainer_binary()] + list(args), capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"{DISPATCHER} exited {proc.returncode}"]
        _, sep, message = lines[-1].partition(": error: ")
        raise UserError(message if sep else lines[-1])
    return json.loads(proc.stdout)
