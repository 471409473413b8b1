"""nfn's version, read when the workspace loads: @nfn_version//:defs.bzl with NFN_VERSION.

The wheel's file name holds it (//py:wheel), and Bazel needs a genrule's output names before
any action runs, so it is read here, from `__version__` in py/nfn/__init__.py, the one place it
is written; Bazel reads it again when that file changes. tools/build_wheel.py checks it.
"""

def _version(rctx, init):
    for line in rctx.read(init).splitlines():
        if line.startswith("__version__"):
            value = line.split("=", 1)[1].strip()
            if len(value) > 2 and value[0] == value[-1] and value[0] in "\"'":
                return value[1:-1]
    fail("nfn_version: no __version__ = \"...\" line in %s" % init)

def _nfn_version_impl(rctx):
    rctx.file("defs.bzl", "NFN_VERSION = %r\n" % _version(rctx, rctx.path(rctx.attr.init)))
    rctx.file("BUILD", 'exports_files(["defs.bzl"])\n')

nfn_version = repository_rule(
    implementation = _nfn_version_impl,
    attrs = {"init": attr.label(default = "//py:nfn/__init__.py", allow_single_file = True)},
)
