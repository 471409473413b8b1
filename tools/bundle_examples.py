"""Bundles the op examples (cc/examples) and the files they build against into one JSON file
the nfn package carries, for `nfn kernels examples`.

    bundle_examples.py --out FILE PATH...

Each PATH is stored under itself (relative to the workspace root), except the Makefile,
which goes to the top. Each example (cc/examples/NAME.cc) opens with `// Category: C` and
`// Shows: TEXT` (continued on the comment lines after it); a missing one stops the build.
"""
import argparse
import json
import os
import sys

EXAMPLES_DIR = "cc/examples/"


def header(path, text):
    """(category, shows) from an example's opening comment."""
    fields, key = {}, None
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        body = line[2:].strip()
        name, sep, value = body.partition(": ")
        if sep and name in ("Category", "Shows"):
            key = name
            fields[key] = value.strip()
        elif key:
            fields[key] += " " + body
    missing = [k for k in ("Category", "Shows") if k not in fields]
    if missing:
        sys.exit(f"bundle_examples: {path}: no `// {missing[0]}:` line in its opening comment")
    return fields["Category"], fields["Shows"]


def bundle(paths):
    examples, files = [], {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        stored = "Makefile" if os.path.basename(path) == "Makefile" else path
        files[stored] = text
        if path.startswith(EXAMPLES_DIR) and path.endswith(".cc"):
            category, shows = header(path, text)
            name = os.path.basename(path)[:-len(".cc")]
            examples.append({"name": name, "category": category, "shows": shows, "path": path})
    return {"schema": 1, "examples": sorted(examples, key=lambda e: e["name"]), "files": files}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(bundle(args.paths), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
