"""Repository rules for optional CUDA libraries; nothing is downloaded.

local_cublaslt: finds cuBLASLt's headers in the interpreter's site-packages (PyPI
nvidia-cublas, nvidia/cu13/include); nothing is downloaded.

The CUDA op library compiles against these headers but does not link libcublasLt: it opens
libcublasLt.so.13 at run time (cuda/ops/cublaslt.cc), so it builds and loads on machines
without the wheel and finds the GPU machine's own copy there. Provides
  @local_cublaslt//:defs.bzl  HAS_CUBLASLT, CUBLASLT_INCLUDE, CUBLASLT_LIB_DIR
  @local_cublaslt//:headers   the headers, plus NFN_HAVE_CUBLASLT=1 (empty without them)

local_cudnn: the cuDNN and cudnn-frontend headers tools/bootstrap.sh extracts into
~/.cache/nfn/cudnn-headers (or $NFN_CUDNN_HEADERS); the attention=cudnn path compiles
against them and opens libcudnn.so.9 at run time. Provides
  @local_cudnn//:defs.bzl  HAS_CUDNN
  @local_cudnn//:headers   the headers, plus NFN_HAVE_CUDNN=1 (empty without them)
  @local_cudnn//:dispatcher  libcudnn.so.9 alone (cuDNN's dispatcher, for a loading test)

local_thunderkittens: the header-only ThunderKittens tree named by NFN_THUNDERKITTENS_DIR,
  @local_thunderkittens//:defs.bzl  HAS_THUNDERKITTENS, THUNDERKITTENS_REASON (why not)
"""

_PROBE = """
import importlib.util, os, sys
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    inc, lib = os.path.join(root, "cu13", "include"), os.path.join(root, "cu13", "lib")
    if os.path.exists(os.path.join(inc, "cublasLt.h")):
        print(inc); print(lib); sys.exit(0)
"""

def _local_cublaslt_impl(rctx):
    env = rctx.os.environ
    python = env.get("PYTHON_BIN_PATH", "") or rctx.which("python3")
    inc, lib = "", ""
    if env.get("NFN_DISABLE_CUDA", "0") in ("", "0") and python:
        res = rctx.execute([str(python), "-c", _PROBE])
        lines = res.stdout.strip().splitlines()
        if res.return_code == 0 and len(lines) == 2:
            inc, lib = lines[0], lines[1]
    rctx.file("defs.bzl", "\n".join([
        "HAS_CUBLASLT = %r" % (inc != ""),
        "CUBLASLT_INCLUDE = %r" % inc,
        "CUBLASLT_LIB_DIR = %r" % lib,
        "",
    ]))
    if inc:
        rctx.symlink(inc, "include")
        build = """
cc_library(
    name = "headers",
    hdrs = glob(["include/*.h"]),
    includes = ["include"],
    defines = ["NFN_HAVE_CUBLASLT=1"],
)
"""
    else:
        build = """
# No nvidia-cublas wheel in the interpreter's site-packages: GEMM ops report why at run time.
cc_library(name = "headers")
"""
    rctx.file("BUILD", """package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])
filegroup(name = "header_files", srcs = glob(["include/*.h"]))
""" + build)

local_cublaslt = repository_rule(
    implementation = _local_cublaslt_impl,
    environ = ["NFN_DISABLE_CUDA", "PYTHON_BIN_PATH", "PATH"],
    local = True,
)

def _local_cudnn_impl(rctx):
    env = rctx.os.environ
    root = env.get("NFN_CUDNN_HEADERS", "")
    if not root:
        cache = env.get("XDG_CACHE_HOME", "") or env.get("HOME", "") + "/.cache"
        root = cache + "/nfn/cudnn-headers"
    found = env.get("NFN_DISABLE_CUDA", "0") in ("", "0") and \
            rctx.path(root + "/include/cudnn.h").exists and \
            rctx.path(root + "/include/cudnn_frontend.h").exists
    rctx.file("defs.bzl", "HAS_CUDNN = %r\n" % found)
    if found:
        rctx.symlink(root + "/include", "include")
        if rctx.path(root + "/lib/libcudnn.so.9").exists:
            rctx.symlink(root + "/lib", "lib")
        build = """
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl"]),
    includes = ["include"],
    defines = ["NFN_HAVE_CUDNN=1"],
)
"""
    else:
        build = """
# No cuDNN headers (tools/bootstrap.sh fetches them where nvcc exists): attention=cudnn
# reports why at run time.
cc_library(name = "headers")
"""
    rctx.file("BUILD", 'package(default_visibility = ["//visibility:public"])\nexports_files(["defs.bzl"])\n' +
              'filegroup(name = "dispatcher", srcs = glob(["lib/libcudnn.so.9"]))\n' + build)

local_cudnn = repository_rule(
    implementation = _local_cudnn_impl,
    environ = ["NFN_DISABLE_CUDA", "NFN_CUDNN_HEADERS", "XDG_CACHE_HOME", "HOME"],
    local = True,
)

def _local_thunderkittens_impl(rctx):
    root = rctx.os.environ.get("NFN_THUNDERKITTENS_DIR", "")
    reason = ""
    if not root:
        reason = "NFN_THUNDERKITTENS_DIR was not set when the CUDA library was built"
    elif not rctx.path(root + "/include/kittens.cuh").exists:
        reason = "NFN_THUNDERKITTENS_DIR=%s has no include/kittens.cuh" % root
    else:
        rctx.symlink(root, "tk")
    rctx.file("defs.bzl", "\n".join([
        "HAS_THUNDERKITTENS = %r" % (reason == ""),
        "THUNDERKITTENS_REASON = %r" % reason,
        "",
    ]))
    rctx.file("BUILD", """package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])
filegroup(name = "headers", srcs = glob(["tk/include/**", "tk/prototype/**"]))
""")

local_thunderkittens = repository_rule(
    implementation = _local_thunderkittens_impl,
    environ = ["NFN_THUNDERKITTENS_DIR"],
    local = True,
)
