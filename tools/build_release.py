"""Writes nfn's release tarball from its wheel (the genrule //:release runs it).

Layout, under one folder nfn-VERSION-linux-x86_64/:
  bin/nfn                     the launcher (tools/nfn_launcher.py); tools/install.sh points its
                              first line at the installed environment's interpreter
  lib/nfn/python/nfn/         the wheel's package as it is: sources, nfn/_native.so, and
                              nfn/_native_bin/ (every trainer, the dispatcher, the op libraries,
                              the bundled shared libraries, each with an $ORIGIN-relative
                              RUNPATH: tools/build_wheel.py), plus _build_info.json (version, commit)
  share/nfn/licenses/C/       the license texts of each bundled component C (tools/licenses.bzl)
  share/nfn/requirements.txt  the wheel's dependencies with their pins, extras included, and
  share/nfn/requirements-nodeps.txt  the data-only packages pip installs with --no-deps
  share/nfn/release.json      version, commit, Python version and platform
  share/nfn/MANIFEST.sha256   `sha256sum -c` lines for every other file
Beside it, NAME.tar.gz.sha256 holds the tarball's own checksum. The same inputs give the same
bytes (sorted entries, zero times and owners). Standard library only.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import posixpath
import sys
import tarfile
import zipfile

from elf_dynamic import is_elf

# A bundled library's file name prefix -> the licenses/ component that covers it.
LICENSED = {"libdnnl.": "onednn", "libscipy_openblas": "openblas", "libgomp.": "libgomp",
            "libcudart.": "cuda"}
ALWAYS = ["nanobind"]  # compiled into nfn/_native.so
PLATFORM = "linux-x86_64"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel", required=True, help="nfn's wheel (//py:wheel)")
    p.add_argument("--out", required=True, help="nfn-VERSION-linux-x86_64.tar.gz to write")
    p.add_argument("--checksum-out", required=True, help="the .sha256 file to write beside it")
    p.add_argument("--launcher", required=True, help="bin/nfn's source (tools/nfn_launcher.py)")
    p.add_argument("--status", required=True, help="Bazel's stable-status.txt (STABLE_NFN_COMMIT)")
    p.add_argument("--nodeps", required=True, help="requirements-nodeps.txt")
    p.add_argument("--licenses", nargs="*", default=[], help="files under a licenses/COMPONENT/ folder")
    return p.parse_args(argv)


def commit_of(status_path):
    with open(status_path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition(" ")
            if key == "STABLE_NFN_COMMIT":
                return value
    return "unknown"


def wheel_files(wheel):
    """({archive path under nfn/: bytes}, METADATA text, python version "3.11")."""
    files, metadata, tag = {}, None, None
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("nfn/"):
                files[name] = z.read(name)
            elif name.endswith(".dist-info/METADATA"):
                metadata = z.read(name).decode()
            elif name.endswith(".dist-info/WHEEL"):
                tag = [l.split(": ", 1)[1] for l in z.read(name).decode().splitlines() if l.startswith("Tag: ")]
    if metadata is None or not tag:
        raise ValueError(f"{wheel}: no METADATA or WHEEL tag in its .dist-info")
    python = tag[0].split("-")[0][2:]
    return files, metadata, python[0] + "." + python[1:]


def requirements(metadata):
    """Every Requires-Dist of METADATA (extras included), markers dropped, in order, once."""
    out = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: "):
            req = line[len("Requires-Dist: "):].split(";", 1)[0].strip()
            if req not in out:
                out.append(req)
    return "".join(r + "\n" for r in out)


def nodeps_lines(path):
    with open(path, encoding="utf-8") as f:
        return "".join(l for l in f if l.strip() and not l.lstrip().startswith("#"))


def license_files(paths, bundled):
    """{share/nfn/licenses/C/file: bytes} for the components the bundled files need."""
    by_component = {}
    for path in paths:
        parts = path.split("/")
        i = len(parts) - 1 - parts[::-1].index("licenses")
        by_component.setdefault(parts[i + 1], []).append(path)
    need = list(ALWAYS)
    for name in bundled:
        for prefix, component in LICENSED.items():
            if name.startswith(prefix) and component not in need:
                need.append(component)
    out = {}
    for component in need:
        if component not in by_component:
            raise ValueError(f"the release bundles {component} but no license text for it was found "
                             "(tools/licenses.bzl)")
        for path in by_component[component]:
            with open(path, "rb") as f:
                out[f"share/nfn/licenses/{component}/{os.path.basename(path)}"] = f.read()
    return out


def release_files(args, version):
    package, metadata, python = wheel_files(args.wheel)
    commit = commit_of(args.status)
    files = {posixpath.join("lib/nfn/python", p): d for p, d in package.items()}
    info = {"version": version, "commit": commit}
    files["lib/nfn/python/nfn/_build_info.json"] = (json.dumps(info, indent=1) + "\n").encode()
    with open(args.launcher, "rb") as f:
        files["bin/nfn"] = f.read()
    bundled = [posixpath.basename(p) for p in package if p.startswith("nfn/_native_bin/lib")]
    files.update(license_files(args.licenses, bundled))
    files["share/nfn/requirements.txt"] = requirements(metadata).encode()
    files["share/nfn/requirements-nodeps.txt"] = nodeps_lines(args.nodeps).encode()
    release = dict(info, python=python, platform=PLATFORM)
    files["share/nfn/release.json"] = (json.dumps(release, indent=1) + "\n").encode()
    manifest = "".join(f"{hashlib.sha256(files[p]).hexdigest()}  {p}\n" for p in sorted(files))
    files["share/nfn/MANIFEST.sha256"] = manifest.encode()
    return files


def write_tarball(out, top, files):
    """A gzip'd tar of `files` under `top`/, sorted, with zero times and owners."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set()
        for path in files:
            parent = posixpath.dirname(path)
            while parent:
                dirs.add(parent)
                parent = posixpath.dirname(parent)
        for name, data in [(d, None) for d in sorted(dirs)] + sorted(files.items()):
            entry = tarfile.TarInfo(posixpath.join(top, name))
            entry.mtime, entry.uid, entry.gid, entry.uname, entry.gname = 0, 0, 0, "", ""
            if data is None:
                entry.type, entry.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(entry)
            else:
                executable = is_elf(data) or data.startswith(b"#!")
                entry.size, entry.mode = len(data), 0o755 if executable else 0o644
                tar.addfile(entry, io.BytesIO(data))
    with open(out, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0, filename="") as gz:
            gz.write(raw.getvalue())


def main(argv=None):
    args = parse_args(argv)
    name = os.path.basename(args.out)
    prefix, suffix = "nfn-", f"-{PLATFORM}.tar.gz"
    try:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            raise ValueError(f"{args.out}: not a release name nfn-VERSION{suffix}")
        version = name[len(prefix):-len(suffix)]
        wheel_version = os.path.basename(args.wheel).split("-")[1]
        if wheel_version != version:
            raise ValueError(f"{args.out}: version {version}, but the wheel is {wheel_version}")
        files = release_files(args, version)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        print(f"build_release: error: {e}", file=sys.stderr)
        return 1
    write_tarball(args.out, name[:-len(".tar.gz")], files)
    with open(args.out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(args.checksum_out, "w", encoding="utf-8") as f:
        f.write(f"{digest}  {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
