"""local_onednn: finds oneDNN (headers and libdnnl.so.3) without downloading anything.

Looks in NFN_ONEDNN_DIR (a prefix with include/oneapi/dnnl and lib/libdnnl.so*), else in the
prefix of the interpreter (PYTHON_BIN_PATH, else python3 on PATH), where the PyPI packages
onednn-cpu-gomp and onednn-devel-cpu-gomp (requirements.txt) install them. Provides
  @local_onednn//:onednn   headers, -ldnnl and an rpath to the library's directory
"""

def _find_prefix(rctx):
    env = rctx.os.environ
    root = env.get("NFN_ONEDNN_DIR", "")
    if root:
        return root, "NFN_ONEDNN_DIR=" + root
    python = env.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not python:
        fail("local_onednn: no python3 on PATH, PYTHON_BIN_PATH and NFN_ONEDNN_DIR unset")
    res = rctx.execute([str(python), "-c", "import sys; print(sys.prefix)"])
    if res.return_code != 0:
        fail("local_onednn: probing %s failed:\n%s" % (python, res.stderr))
    prefix = res.stdout.strip()
    return prefix, "the prefix of %s (%s)" % (python, prefix)

def _local_onednn_impl(rctx):
    prefix, where = _find_prefix(rctx)
    if not rctx.path(prefix + "/include/oneapi/dnnl/dnnl.hpp").exists:
        fail("local_onednn: no include/oneapi/dnnl/dnnl.hpp under %s; run tools/bootstrap.sh " % where +
             "(it installs onednn-devel-cpu-gomp) or set NFN_ONEDNN_DIR")
    if not rctx.path(prefix + "/lib/libdnnl.so.3").exists:
        fail("local_onednn: no lib/libdnnl.so.3 under %s; run tools/bootstrap.sh " % where +
             "(it installs onednn-cpu-gomp) or set NFN_ONEDNN_DIR")
    lib = str(rctx.path(prefix + "/lib").realpath)
    rctx.symlink(prefix + "/include/oneapi", "include/oneapi")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "onednn",
    hdrs = glob(["include/oneapi/dnnl/*.h", "include/oneapi/dnnl/*.hpp"]),
    includes = ["include"],
    # Linked by soname so the binary asks for libdnnl.so.3; found at run time by the rpath.
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-l:libdnnl.so.3"],
)
""".format(lib = lib))

local_onednn = repository_rule(
    implementation = _local_onednn_impl,
    environ = ["NFN_ONEDNN_DIR", "PYTHON_BIN_PATH", "PATH"],
    local = True,
)
