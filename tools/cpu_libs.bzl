"""The CPU op library's GEMM libraries, found without downloading anything.

local_onednn: oneDNN (headers and libdnnl.so.3), for bf16 matmuls and attention's batched
  products. Looks in NFN_ONEDNN_DIR (a prefix with include/oneapi/dnnl and lib/libdnnl.so*),
  else in the prefix of the interpreter (PYTHON_BIN_PATH, else python3 on PATH), where the
  PyPI packages onednn-cpu-gomp and onednn-devel-cpu-gomp (requirements.txt) install them.
  Provides @local_onednn//:onednn (headers, the library by soname, an rpath to it).

local_openblas: OpenBLAS (cblas.h and libscipy_openblas.so), for the f32 GEMMs. Looks in
  NFN_OPENBLAS_DIR (a directory with include/cblas.h and lib/libscipy_openblas.so), else in
  the PyPI package scipy-openblas32 (requirements.txt) of the interpreter. Its symbols carry
  the scipy_ prefix, so it cannot clash with another BLAS in the same process.
  Provides @local_openblas//:openblas.
"""

def _python(rctx, rule):
    python = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not python:
        fail("%s: no python3 on PATH and PYTHON_BIN_PATH unset" % rule)
    return str(python)

def _probe(rctx, rule, code):
    python = _python(rctx, rule)
    res = rctx.execute([python, "-c", code])
    if res.return_code != 0:
        fail("%s: probing %s failed (run tools/bootstrap.sh):\n%s" % (rule, python, res.stderr))
    return res.stdout.strip(), python

def _library(rctx, name, lib_dir, lib_file):
    lib = str(rctx.path(lib_dir).realpath)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "{name}",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp"]),
    includes = ["include"],
    # Linked by file name so the binary asks for its soname; found at run time by the rpath.
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-l:{lib_file}"],
)
""".format(name = name, lib = lib, lib_file = lib_file))

def _local_onednn_impl(rctx):
    prefix = rctx.os.environ.get("NFN_ONEDNN_DIR", "")
    where = "NFN_ONEDNN_DIR=" + prefix
    if not prefix:
        prefix, python = _probe(rctx, "local_onednn", "import sys; print(sys.prefix)")
        where = "the prefix of %s (%s)" % (python, prefix)
    for f, pkg in [("include/oneapi/dnnl/dnnl.hpp", "onednn-devel-cpu-gomp"), ("lib/libdnnl.so.3", "onednn-cpu-gomp")]:
        if not rctx.path(prefix + "/" + f).exists:
            fail("local_onednn: no %s under %s; run tools/bootstrap.sh (it installs %s) or set NFN_ONEDNN_DIR" % (f, where, pkg))
    rctx.symlink(prefix + "/include/oneapi", "include/oneapi")
    _library(rctx, "onednn", prefix + "/lib", "libdnnl.so.3")

local_onednn = repository_rule(
    implementation = _local_onednn_impl,
    environ = ["NFN_ONEDNN_DIR", "PYTHON_BIN_PATH", "PATH"],
    local = True,
)

def _local_openblas_impl(rctx):
    root = rctx.os.environ.get("NFN_OPENBLAS_DIR", "")
    where = "NFN_OPENBLAS_DIR=" + root
    if not root:
        root, python = _probe(rctx, "local_openblas", "import os, scipy_openblas32 as s; print(os.path.dirname(s.__file__))")
        where = "scipy-openblas32 of %s (%s)" % (python, root)
    for f in ["include/cblas.h", "lib/libscipy_openblas.so"]:
        if not rctx.path(root + "/" + f).exists:
            fail("local_openblas: no %s under %s; run tools/bootstrap.sh (it installs scipy-openblas32) or set NFN_OPENBLAS_DIR" % (f, where))
    rctx.symlink(root + "/include", "include")
    _library(rctx, "openblas", root + "/lib", "libscipy_openblas.so")

local_openblas = repository_rule(
    implementation = _local_openblas_impl,
    environ = ["NFN_OPENBLAS_DIR", "PYTHON_BIN_PATH", "PATH"],
    local = True,
)
