"""Run the chat tools: the calculator and sandboxed Python.

  nfn tool calc EXPR [--json]
  nfn tool python FILE|- [--timeout S] [--json]

Prints the tool's output; on failure `error: ...` (and `timed_out: true`) on stderr and
exit status 1. --json prints {"ok", "output", "error", "timed_out"} (plus the sandbox's
isolation report for python) and exits 0 or 1 the same way.
"""
import json
import sys

from nfn.cli.common import add_command


def report(args, result, extra=None):
    if args.json:
        out = {"ok": result.ok, "output": result.output, "error": result.error,
               "timed_out": result.timed_out}
        out.update(extra or {})
        print(json.dumps(out, indent=1))
    else:
        sys.stdout.write(result.output + ("" if not result.output or result.output.endswith("\n") else "\n"))
        if not result.ok:
            print(f"error: {result.error}", file=sys.stderr)
            if result.timed_out:
                print("timed_out: true", file=sys.stderr)
    return 0 if result.ok else 1


def run_calc(args):
    from nfn.sandbox.calculator import calculate

    return report(args, calculate(args.expr))


def run_python(args):
    from nfn.errors import UserError
    from nfn.sandbox.python_exec import run_python as run

    if not 0 < args.timeout <= 600:  # NaN too
        raise UserError(f"--timeout must be in (0, 600] seconds, got {args.timeout}")
    if args.file == "-":
        try:
            code = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"standard input: not UTF-8 text (byte {e.start})") from None
    else:
        try:
            with open(args.file, encoding="utf-8") as f:
                code = f.read()
        except OSError as e:
            raise UserError(f"{args.file}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{args.file}: not UTF-8 text (byte {e.start})") from None
    result = run(code, timeout=args.timeout)
    iso = result.details["isolation"]
    if not args.json and iso["missing"]:
        print(f"warning: sandbox lacks: {'; '.join(iso['missing'])}", file=sys.stderr)
    return report(args, result, {"isolation": {"mode": iso["mode"], "user": iso["user"],
                                               "missing": iso["missing"]},
                                 "wall_s": result.details["wall_s"]})


def register(sub):
    p = add_command(sub, "tool", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    calc = actions.add_parser("calc", help="evaluate arithmetic and str.count safely")
    calc.add_argument("expr", help='e.g. "3*(4+5)" or "\'strawberry\'.count(\'r\')"; one that starts '
                      'with a minus goes after --: nfn tool calc -- "-7%%3"')
    calc.add_argument("--json", action="store_true", help="print a JSON result")
    calc.set_defaults(run=run_calc)
    py = actions.add_parser("python", help="run Python in a sandbox")
    py.add_argument("file", help="a .py file, or - for standard input")
    py.add_argument("--timeout", type=float, default=5.0, help="wall-clock limit in seconds (default: 5)")
    py.add_argument("--json", action="store_true", help="print a JSON result")
    py.set_defaults(run=run_python)
