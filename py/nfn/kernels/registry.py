"""The op registry: which ops exist, on which backend, for which dtypes, and why not.

Reads op_registry.json, which the build generates from cc/ops/nfn_ops.def, NFN_ABI_VERSION in
cc/ops/nfn_tile_ops.h and each backend's support file (tools/gen_op_registry.py). Metadata only: no op library is loaded.
"""
import json
import os

from nfn.errors import UserError

REGISTRY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_registry.json")


def load(path=REGISTRY_FILE):
    try:
        with open(path, encoding="utf-8") as f:
            registry = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: op registry missing; run nfn through Bazel "
                        "(bazel run //py:nfn -- kernels list), which generates it") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: op registry is not valid JSON ({e})") from None
    if registry.get("schema") != 1:
        raise UserError(f"{path}: op registry schema {registry.get('schema')!r}, expected 1")
    return registry


def format_table(registry):
    """One line per op: name, category, then each backend's dtypes (or '-' with the reason)."""
    backends = registry["backends"]
    rows = [["op", "category"] + backends]
    notes = []
    for op in registry["ops"]:
        cells = []
        for backend in backends:
            support = op["support"][backend]
            ok = [d for d, cell in support.items() if cell["supported"]]
            cells.append(" ".join(ok) if ok else "-")
            for dtype, cell in support.items():
                if not cell["supported"]:
                    notes.append(f"  {op['name']} on {backend} ({dtype}): {cell['reason']}")
        rows.append([op["name"], op["category"]] + cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if notes:
        lines += ["", "unsupported:"] + notes
    lines += ["", "ops per dtype (supported/listed):"]
    for backend, dtypes in registry.get("by_dtype", {}).items():
        cells = [f"{d} {c['supported']}/{c['supported'] + c['unsupported']}" for d, c in dtypes.items()]
        lines.append(f"  {backend}: " + ", ".join(cells))
    return "\n".join(lines)
