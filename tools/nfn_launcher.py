#!/usr/bin/env python3
"""`nfn` in an installed release (bin/nfn): tools/install.sh points the first line at the
interpreter of the release's environment, whose nfn.pth puts lib/nfn/python on sys.path."""
import sys

from nfn.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
