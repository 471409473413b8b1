"""Runs `nfn ARGS` in a fresh interpreter and reports what it imported, so tests can hold
the light paths (help, listings, print-command) to the standard library."""
import json
import os
import subprocess
import sys

import nfn

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))

PROBE = """
import json, sys
from nfn.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
sys.stdout.flush()
print("\\n@@MODULES@@" + json.dumps(sorted(sys.modules)))
sys.exit(code or 0)
"""


def run_nfn(args, env=None, timeout=300):
    """(exit code, stdout, stderr, sorted imported module names) of `nfn ARGS`."""
    full_env = dict(os.environ, PYTHONPATH=PY_ROOT, **(env or {}))
    proc = subprocess.run([sys.executable, "-c", PROBE] + list(args), capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    out, _, modules = proc.stdout.partition("\n@@MODULES@@")
    return proc.returncode, out, proc.stderr, json.loads(modules) if modules else []
