"""A fresh Python interpreter that imports this same nfn.

The parent's import path and nfn's package path (its built _native module included, wherever
that lies: a Bazel runfiles tree, a test, an install) are handed to the child, then it calls a
function of nfn's and exits with what the function returns. `nfn bench infer` measures each
configuration in one; `nfn pipeline` runs each stage's commands in them.
"""
import json
import sys

BOOT = """import importlib, json, sys
boot = json.loads(sys.argv[1])
sys.path[:0] = boot["sys_path"]
import nfn
nfn.__path__[:] = boot["nfn_path"]
module, _, function = boot["call"].partition(":")
sys.exit(getattr(importlib.import_module(module), function)(sys.argv[2:]))
"""


def argv(call, args=()):
    """The command line of a child that runs `call` ("module:function", called with the list of
    args) and exits with its return value."""
    import nfn
    boot = {"sys_path": [p for p in sys.path if p], "nfn_path": list(nfn.__path__), "call": call}
    return [sys.executable, "-c", BOOT, json.dumps(boot)] + [str(a) for a in args]
