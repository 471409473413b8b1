"""Generates the op registry (JSON) behind `nfn kernels list` from the op ABI's own table.

Inputs are the files the C++ builds expand: cc/ops/nfn_ops.def (every op, its category and
dtypes), nfn_tile_ops.h (NFN_ABI_VERSION, which the trainer asks each op library for) and one
support file per backend listing the cells it does not implement, with why. The listing
therefore cannot drift from the ABI: both are made from the same lines.

usage: gen_op_registry.py --ops nfn_ops.def --abi nfn_tile_ops.h --backend cpu=cpu/support.def ... --out FILE
"""
import argparse
import json
import re
import sys

OP_RE = re.compile(r'NFN_OP\(\s*(\w+)\s*,\s*(\w+)\s*,\s*"([^"]*)"\s*,')
ABI_RE = re.compile(r"^#define NFN_ABI_VERSION (\d+)$", re.M)
UNSUPPORTED_RE = re.compile(r'NFN_UNSUPPORTED\(\s*(\w+)\s*,\s*(\w+|\*)\s*,\s*"([^"]+)"\s*\)')


def strip_comments(text):
    """Blanks C comments but keeps line breaks, so line numbers stay true."""
    return re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def parse_ops(path):
    text = strip_comments(open(path, encoding="utf-8").read())
    ops = []
    for m in OP_RE.finditer(text):
        name, category, dtypes = m.group(1), m.group(2), m.group(3).split()
        if not dtypes:
            raise SystemExit(f"{path}:{line_of(text, m.start())}: op {name} lists no dtypes")
        ops.append({"name": name, "category": category, "dtypes": dtypes})
    if text.count("NFN_OP(") != len(ops):
        raise SystemExit(f"{path}: an NFN_OP line does not match NFN_OP(name, category, \"dtypes\", (params))")
    return ops


def parse_abi_version(path):
    found = ABI_RE.findall(open(path, encoding="utf-8").read())
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one '#define NFN_ABI_VERSION N' line, found {len(found)}")
    return int(found[0])


def parse_support(path, ops):
    text = strip_comments(open(path, encoding="utf-8").read())
    by_name = {op["name"]: op for op in ops}
    gaps = {}
    for m in UNSUPPORTED_RE.finditer(text):
        name, dtype, reason = m.groups()
        where = f"{path}:{line_of(text, m.start())}"
        if name not in by_name:
            raise SystemExit(f"{where}: unknown op {name!r}")
        dtypes = by_name[name]["dtypes"] if dtype == "*" else [dtype]
        for d in dtypes:
            if d not in by_name[name]["dtypes"]:
                raise SystemExit(f"{where}: op {name} has no dtype {d!r}")
            gaps[(name, d)] = reason
    if text.count("NFN_UNSUPPORTED(") != len(list(UNSUPPORTED_RE.finditer(text))):
        raise SystemExit(f"{path}: an NFN_UNSUPPORTED line does not match NFN_UNSUPPORTED(op, dtype, \"reason\")")
    return gaps


def build_registry(ops, backends, abi_version):
    rows = []
    for op in ops:
        support = {}
        for backend, gaps in backends.items():
            support[backend] = {
                d: ({"supported": False, "reason": gaps[(op["name"], d)]}
                    if (op["name"], d) in gaps else {"supported": True, "reason": None})
                for d in op["dtypes"]
            }
        implemented = [b for b in backends if any(c["supported"] for c in support[b].values())]
        rows.append({**op, "backends": implemented, "support": support})
    return {"schema": 1, "abi_version": abi_version, "backends": list(backends), "by_dtype": by_dtype(rows, backends),
            "ops": rows}


def by_dtype(rows, backends):
    """Per backend and dtype, how many ops run it and how many do not ("any": dtype-free ops)."""
    counts = {b: {} for b in backends}
    for op in rows:
        for backend in backends:
            for dtype, cell in op["support"][backend].items():
                count = counts[backend].setdefault(dtype, {"supported": 0, "unsupported": 0})
                count["supported" if cell["supported"] else "unsupported"] += 1
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", required=True)
    parser.add_argument("--abi", required=True, help="nfn_tile_ops.h, for NFN_ABI_VERSION")
    parser.add_argument("--backend", action="append", default=[], metavar="NAME=SUPPORT_FILE")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    ops = parse_ops(args.ops)
    backends = {}
    for spec in args.backend:
        name, _, path = spec.partition("=")
        backends[name] = parse_support(path, ops)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(build_registry(ops, backends, parse_abi_version(args.abi)), f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
