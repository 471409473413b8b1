"""The CPU op library's GEMM libraries, found without downloading anything.

local_onednn: oneDNN (headers and libdnnl.so.3), for bf16 matmuls and attention's batched
  products. Looks in NFN_ONEDNN_DIR (a prefix with include/oneapi/dnnl and lib/libdnnl.so*),
  else in the prefix of the interpreter (PYTHON_BIN_PATH, else python3 on PATH), where the
  PyPI packages onednn-cpu-gomp and onednn-devel-cpu-gomp (requirements.txt) install them.
  Provides @local_onednn//:onednn (headers, the library by soname, an rpath to it) and
  @local_onednn//:runtime (libdnnl.so.3 and the compiler's libgomp.so.1, for the wheel).

local_openblas: OpenBLAS (cblas.h and libscipy_openblas.so), for the f32 GEMMs. Looks in
  NFN_OPENBLAS_DIR (a directory with include/cblas.h and lib/libscipy_openblas.so), else in
  the PyPI package scipy-openblas32 (requirements.txt) of the interpreter. Its symbols carry
  the scipy_ prefix, so it cannot clash with another BLAS in the same process.
  Provides @local_openblas//:openblas and @local_openblas//:runtime (the library file).
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

def _library(rctx, name, lib_dir, lib_file, runtime = []):
    """The BUILD file: cc_library `name`, and :runtime, the shared libraries a wheel bundles
    (lib_file and `runtime`, each linked under runtime/ by its own name)."""
    lib = str(rctx.path(lib_dir).realpath)
    for path in [lib + "/" + lib_file] + runtime:
        rctx.symlink(path, "runtime/" + path.split("/")[-1])
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "{name}",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp"]),
    includes = ["include"],
    # Linked by file name so the binary asks for its soname; found at run time by the rpath.
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-l:{lib_file}"],
)
filegroup(name = "runtime", srcs = glob(["runtime/*"]))
""".format(name = name, lib = lib, lib_file = lib_file))

def _compiler_libgomp(rctx):
    """The libgomp.so.1 the C++ compiler links -fopenmp against, as a list; empty if none."""
    cc = rctx.os.environ.get("CC") or rctx.which("gcc") or rctx.which("cc")
    if not cc:
        return []
    res = rctx.execute([str(cc), "-print-file-name=libgomp.so.1"])
    path = res.stdout.strip()
    return [path] if res.return_code == 0 and path.startswith("/") else []  # by its soname

def _find(rctx, rule, env, probe, what, files):
    """The library's root: $env, else what `probe` prints; fails naming each missing (file, package)."""
    root = rctx.os.environ.get(env, "")
    where = env + "=" + root
    if not root:
        root, python = _probe(rctx, rule, probe)
        where = "%s of %s (%s)" % (what, python, root)
    for f, pkg in files:
        if not rctx.path(root + "/" + f).exists:
            fail("%s: no %s under %s; run tools/bootstrap.sh (it installs %s) or set %s" % (rule, f, where, pkg, env))
    return root

def _local_onednn_impl(rctx):
    prefix = _find(rctx, "local_onednn", "NFN_ONEDNN_DIR", "import sys; print(sys.prefix)", "the prefix",
                   [("include/oneapi/dnnl/dnnl.hpp", "onednn-devel-cpu-gomp"), ("lib/libdnnl.so.3", "onednn-cpu-gomp")])
    rctx.symlink(prefix + "/include/oneapi", "include/oneapi")
    # This oneDNN is the GNU OpenMP build: a wheel bundles libgomp with it.
    _library(rctx, "onednn", prefix + "/lib", "libdnnl.so.3", _compiler_libgomp(rctx))

local_onednn = repository_rule(
    implementation = _local_onednn_impl,
    environ = ["NFN_ONEDNN_DIR", "PYTHON_BIN_PATH", "PATH", "CC"],
    local = True,
)

def _local_openblas_impl(rctx):
    root = _find(rctx, "local_openblas", "NFN_OPENBLAS_DIR",
                 "import os, scipy_openblas32 as s; print(os.path.dirname(s.__file__))", "scipy-openblas32",
                 [("include/cblas.h", "scipy-openblas32"), ("lib/libscipy_openblas.so", "scipy-openblas32")])
    rctx.symlink(root + "/include", "include")
    _library(rctx, "openblas", root + "/lib", "libscipy_openblas.so")

local_openblas = repository_rule(
    implementation = _local_openblas_impl,
    environ = ["NFN_OPENBLAS_DIR", "PYTHON_BIN_PATH", "PATH"],
    local = True,
)
