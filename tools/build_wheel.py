"""Writes nfn's wheel from the files Bazel built (the genrule //py:wheel runs it).

Layout of the wheel:
  nfn/...               the Python package: sources, generated JSON, the module nfn/_native.so
  nfn/_native_bin/      the native binaries, the op libraries, and the shared libraries
                        outside the base system that any of them loads (--bundle-candidates:
                        oneDNN, OpenBLAS, libgomp, CUDA's runtime), only those some file needs
  nfn-V.dist-info/      METADATA, WHEEL, entry_points.txt, RECORD

Every native file's library search path (RUNPATH) is rewritten to $ORIGIN-relative folders
inside the wheel, so an installed copy loads the bundled libraries wherever it lives and
never looks at the build machine's paths. Only glibc and the GCC C++ runtime (SYSTEM_LIBRARIES)
come from the machine. A library that is neither system nor bundled fails the build.
Binaries find each other and the op libraries beside themselves (cc/util/files.cc), and
nfn/native_bin.py finds the binaries here. Standard library only (zipfile, not setuptools).
"""
import argparse
import os
import posixpath
import sys
import zipfile

from elf_dynamic import ElfDynamic, is_elf
import wheel_metadata as meta

NAME = "nfn"
NATIVE_DIR = "nfn/_native_bin"
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                    "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the same bytes from the same inputs


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the .whl to write; its name gives version and tag")
    p.add_argument("--init", required=True, help="the package's __init__.py (__version__, summary)")
    p.add_argument("--requirements", required=True, help="requirements.txt (dependency versions)")
    p.add_argument("--requires", action="append", default=[], help="a runtime dependency's name")
    p.add_argument("--extra", action="append", default=[], metavar="EXTRA=NAME,...",
                   help="an optional feature and the dependencies it adds")
    p.add_argument("--console-script", action="append", default=[], metavar="COMMAND=MODULE:FUNCTION")
    p.add_argument("--bin-dir", required=True, help="Bazel's output folder ($(BINDIR))")
    p.add_argument("--package-root", required=True, help="the folder that holds the package (py)")
    p.add_argument("--package-files", nargs="+", required=True, help="files under the package root")
    p.add_argument("--native-files", nargs="+", required=True, help="files for " + NATIVE_DIR)
    p.add_argument("--bundle-candidates", nargs="*", default=[],
                   help="non-system shared libraries to bundle when a native file needs them")
    return p.parse_args(argv)


def wheel_tag(out):
    """(version, tag) from a file name nfn-VERSION-PY-ABI-PLATFORM.whl."""
    parts = os.path.basename(out)[:-len(".whl")].split("-")
    if len(parts) != 5 or parts[0] != NAME:
        raise ValueError(f"{out}: not a wheel name {NAME}-VERSION-PYTHON-ABI-PLATFORM.whl")
    return parts[1], "-".join(parts[2:])


def package_path(path, bin_dir, root):
    """The archive path of a source or generated file under the package root."""
    rel = path[len(bin_dir) + 1:] if path.startswith(bin_dir + "/") else path
    if not rel.startswith(root + "/"):
        raise ValueError(f"{path}: not under {root}/")
    return rel[len(root) + 1:]


def read(path):
    with open(path, "rb") as f:
        return bytearray(f.read())


def gather(args):
    """{archive path: bytearray}: the package files and the native files, without bundling."""
    files = {}
    for path in args.package_files:
        files[package_path(path, args.bin_dir, args.package_root)] = read(path)
    for path in args.native_files:
        files[posixpath.join(NATIVE_DIR, os.path.basename(path))] = read(path)
    return files


def bundle(files, candidates):
    """Adds every candidate library some native file (or bundled library) needs to NATIVE_DIR;
    a needed library that is neither system nor a candidate is a ValueError naming both."""
    by_name = {os.path.basename(c): c for c in candidates}
    pending = [p for p, d in files.items() if is_elf(d)]
    while pending:
        path = pending.pop()
        for lib in ElfDynamic(files[path], path).needed(files[path]):
            target = posixpath.join(NATIVE_DIR, lib)
            if lib in SYSTEM_LIBRARIES or target in files:
                continue
            if lib not in by_name:
                raise ValueError(f"{path} needs {lib}, which is neither a system library nor among "
                                 "the libraries to bundle")
            files[target] = read(by_name[lib])
            pending.append(target)


def relocate(files):
    """Rewrites each native file's RUNPATH to reach NATIVE_DIR from its own folder."""
    for path, data in files.items():
        if not is_elf(data):
            continue
        elf = ElfDynamic(data, path)
        rel = posixpath.relpath(NATIVE_DIR, posixpath.dirname(path))
        if elf.runpath(data) is not None:
            elf.set_runpath(data, "$ORIGIN" if rel == "." else "$ORIGIN/" + rel)


def check_loadable(files, roots):
    """Follows the loader from each root (breadth first, as glibc maps dependencies): every
    library a file needs must be a system one, already mapped, or found through that file's
    own RUNPATH. A bundled library without a RUNPATH (libdnnl) thus relies on its users
    needing its dependencies (libgomp) first; a ValueError says where that fails."""
    for root in roots:
        queue, mapped = [root], {posixpath.basename(root)}
        for path in queue:
            elf = ElfDynamic(files[path], path)
            for lib in elf.needed(files[path]):
                if lib in SYSTEM_LIBRARIES or lib in mapped:
                    continue
                if elf.runpath(files[path]) is None:
                    raise ValueError(f"{path} (loaded by {root}) needs {lib} but has no RUNPATH to "
                                     f"find it in {NATIVE_DIR}")
                mapped.add(lib)
                queue.append(posixpath.join(NATIVE_DIR, lib))


def dist_info(args, version, tag):
    """The .dist-info files except RECORD, as {archive path: bytes}."""
    init_version, summary = meta.package_info(args.init)
    if init_version != version:
        raise ValueError(f"{args.out}: version {version}, but {args.init} says {init_version} "
                         "(the @nfn_version repository is stale: run `bazel sync --only=nfn_version`)")
    running = "cp%d%d" % sys.version_info[:2]
    if not tag.startswith(running + "-"):
        raise ValueError(f"{args.out}: tag {tag}, but this interpreter is {running}")
    reqs = meta.read_requirements(args.requirements)
    requires = [meta.requirement(reqs, n, args.requirements) for n in args.requires]
    extras = {}
    for spec in args.extra:
        extra, _, names = spec.partition("=")
        extras[extra] = [meta.requirement(reqs, n, args.requirements) for n in names.split(",") if n]
    scripts = dict(s.split("=", 1) for s in args.console_script)
    info = f"{NAME}-{version}.dist-info"
    return {
        f"{info}/METADATA": meta.metadata(NAME, version, summary, tag.split("-")[0], requires, extras).encode(),
        f"{info}/WHEEL": meta.wheel_file(tag).encode(),
        f"{info}/entry_points.txt": meta.entry_points(scripts).encode(),
    }


def write_wheel(out, files, info, record_path):
    """The zip: package files sorted, then .dist-info with RECORD last; executables keep +x."""
    rows = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        def add(path, data):
            entry = zipfile.ZipInfo(path, ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = (0o100755 if is_elf(data) else 0o100644) << 16
            z.writestr(entry, bytes(data))
            rows.append(meta.record_line(path, data))

        for path in sorted(files):
            add(path, files[path])
        for path in sorted(info):
            add(path, info[path])
        record = "\n".join(rows + [f"{record_path},,"]) + "\n"
        entry = zipfile.ZipInfo(record_path, ZIP_TIME)
        entry.external_attr = 0o100644 << 16
        z.writestr(entry, record, compress_type=zipfile.ZIP_DEFLATED)


def main(argv=None):
    args = parse_args(argv)
    try:
        version, tag = wheel_tag(args.out)
        files = gather(args)
        built = [p for p, d in files.items() if is_elf(d)]
        bundle(files, args.bundle_candidates)
        relocate(files)
        check_loadable(files, built)
        info = dist_info(args, version, tag)
        if any("," in p for p in files):
            raise ValueError("a file name holds a comma, which RECORD cannot hold unquoted")
    except (OSError, ValueError) as e:
        print(f"build_wheel: error: {e}", file=sys.stderr)
        return 1
    write_wheel(args.out, files, info, f"{NAME}-{version}.dist-info/RECORD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
