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


def find(name, env=None):
    """The native program `name` (the dispatcher, nfn_op_probe): $NFN_NATIVE_BIN_DIR, else
    the installed wheel's copy inside this package, else Bazel's runfiles beside this
    package; None where none holds it."""
    env = os.environ if env is None else env
    candidates = [os.path.join(env[BINARY_ENV], name)] if env.get(BINARY_ENV) else []
    # The wheel puts the binaries and their libraries in nfn/_native_bin (tools/build_wheel.py).
    candidates.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_bin", name))
    # <runfiles>/nfn/py/nfn/native_bin.py -> <runfiles>/nfn/cc/bin/
    workspace = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates.append(os.path.join(workspace, "cc", "bin", name))
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


def trainer_binary():
    """The dispatcher binary (find), or a UserError saying how to build it."""
    path = find(DISPATCHER)
    if path:
        return path
    raise UserError(f"the native trainer {DISPATCHER} is not built; run through `bazel run //py:nfn`, "
                    f"install the wheel (`bazel build //py:wheel`) or point ${BINARY_ENV} at a directory "
                    "holding it")


def ask(args):
    """The JSON object the binary prints for a query; its one-line error as a UserError."""
    proc = subprocess.run([trainer_binary()] + list(args), capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"{DISPATCHER} exited {proc.returncode}"]
        _, sep, message = lines[-1].partition(": error: ")
        raise UserError(message if sep else lines[-1])
    return json.loads(proc.stdout)
