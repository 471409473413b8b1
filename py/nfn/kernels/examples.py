"""`nfn kernels examples`: one runnable C++ program a category of cc/ops/nfn_ops.def, each
calling that category's ops through the op ABI on small inputs. The build bundles them with
the loader, the ABI headers and a Makefile into op_examples.json beside this module
(tools/bundle_examples.py). Standard library only.
"""
import os

from nfn.errors import UserError

BUNDLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_examples.json")
CPU_LIB = "libnfn_native_train_cpu_ops.so"


def load(path=BUNDLE_FILE):
    from nfn import fileio

    if not os.path.exists(path):
        raise UserError(f"{path}: the op examples are missing; run nfn through Bazel "
                        "(bazel run //py:nfn -- kernels examples), which bundles them")
    bundle = fileio.read_json(path)
    if bundle.get("schema") != 1:
        raise UserError(f"{path}: op examples schema {bundle.get('schema')!r}, expected 1")
    return bundle


def format_list(bundle, width=100):
    """name, category and what each example shows (wrapped to `width`), one example a row."""
    import textwrap

    rows = [(e["name"], e["category"], e["shows"]) for e in bundle["examples"]]
    w = [max(len(r[i]) for r in rows + [("name", "category", "")]) for i in range(2)]
    indent = " " * (w[0] + w[1] + 4)
    lines = [f"{'name'.ljust(w[0])}  {'category'.ljust(w[1])}  shows"]
    for name, category, shows in rows:
        lines.append(textwrap.fill(shows, width, initial_indent=f"{name.ljust(w[0])}  {category.ljust(w[1])}  ",
                                   subsequent_indent=indent))
    return "\n".join(lines)


def write(bundle, output_dir):
    """Writes every bundled file under output_dir (made if missing); refuses to overwrite a
    file. Returns the paths written."""
    targets = [(os.path.join(output_dir, *rel.split("/")), text) for rel, text in sorted(bundle["files"].items())]
    existing = [path for path, _ in targets if os.path.lexists(path)]
    if existing:
        raise UserError(f"{existing[0]} exists; write the examples to a new or empty directory")
    for path, text in targets:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return [path for path, _ in targets]


def cpu_library(env=None):
    """The CPU op library the trainers would open from here ($NFN_TILE_OPS_DIR, else the
    installed wheel's copy, else Bazel's runfiles beside this package), for the run hint; None
    where none holds it."""
    env = os.environ if env is None else env
    dirs = [env["NFN_TILE_OPS_DIR"]] if env.get("NFN_TILE_OPS_DIR") else []
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs.append(os.path.join(package, "_native_bin"))  # the wheel's (tools/build_wheel.py)
    # <runfiles>/nfn/py/nfn/ -> <runfiles>/nfn/cc/ops/
    dirs.append(os.path.join(os.path.dirname(os.path.dirname(package)), "cc", "ops"))
    return next((os.path.join(d, CPU_LIB) for d in dirs if os.path.exists(os.path.join(d, CPU_LIB))), None)
