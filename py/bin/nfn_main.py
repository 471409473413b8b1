"""Entry point of `bazel run //py:nfn`; see nfn/cli/main.py.

It lives in py/bin, not py/, because Python puts the script's real directory first on
sys.path: from py/ that would shadow the built package (generated files) with the sources.
"""
import sys

from nfn.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
