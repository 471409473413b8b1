"""Inspect the op libraries: which ops exist on which backend and dtype.

  nfn kernels list [--json]   the op registry, from metadata only (no library is loaded)
"""
import json
import sys

from nfn.cli.common import add_command


def run_list(args):
    from nfn.kernels import registry

    reg = registry.load()
    if args.json:
        json.dump(reg, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(registry.format_table(reg))
    return 0


def register(sub):
    p = add_command(sub, "kernels", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    lst = actions.add_parser("list", help="the op registry: ops, backends, dtypes")
    lst.add_argument("--json", action="store_true", help="print the registry as JSON")
    lst.set_defaults(run=run_list)
