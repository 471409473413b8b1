"""Run the chat tools: the calculator and sandboxed Python.

  nfn tool calc EXPR [--json]
  nfn tool python FILE|- [--timeout S] [--json]
"""
from nfn.cli.common import add_command, not_implemented


def register(sub):
    p = add_command(sub, "tool", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    calc = actions.add_parser("calc", help="evaluate arithmetic safely")
    calc.add_argument("expr")
    calc.add_argument("--json", action="store_true")
    calc.set_defaults(run=not_implemented("nfn tool calc", "#7"))
    py = actions.add_parser("python", help="run Python in a sandbox")
    py.add_argument("file", help="a .py file, or - for standard input")
    py.add_argument("--timeout", type=float, default=5.0, help="wall-clock limit in seconds")
    py.add_argument("--json", action="store_true")
    py.set_defaults(run=not_implemented("nfn tool python", "#7"))
