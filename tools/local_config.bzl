"""Repository rules that find the local Python and CUDA toolchains; nothing is downloaded.

local_python (interpreter from PYTHON_BIN_PATH, else python3 on PATH) provides
  @local_python//:py_toolchain    a py_runtime pinned to that interpreter; launchers use it
                                  as their shebang, so tests work under a stripped PATH
  @local_python//:python_headers  Python.h
  @local_python//:nanobind        nanobind compiled from the pip package's sources
  @local_python//:defs.bzl        PYTHON, PY_EXT_SUFFIX, PY_WHEEL_TAG, NUMPY_INCLUDE,
                                  NANOBIND_DIR

local_cuda (off when NFN_DISABLE_CUDA is set to anything but 0; nvcc from NFN_CUDA_PATH,
CUDA_PATH, PATH or /usr/local/cuda) provides
  @local_cuda//:defs.bzl  HAS_CUDA, NVCC, CUDA_PATH, CUDA_VERSION (nvcc --version's release
                          and build lines), CUDA_COMPATIBLE
  @local_cuda//:cudart    headers and libcudart; incompatible (so skipped) without CUDA
  @local_cuda//:runtime   libcudart.so.* files, which the wheel bundles (none without CUDA)
"""

_PY_PROBE = """
import os, sys, sysconfig
print(sys.executable)
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")
# A wheel's tag for extensions built here: full CPython ABI of this minor version, the plain
# platform (no manylinux audit), e.g. cp311-cp311-linux_x86_64; empty for other interpreters.
py = "cp%d%d" % sys.version_info[:2]
print("%s-%s%s-%s" % (py, py, sys.abiflags, sysconfig.get_platform().replace("-", "_").replace(".", "_"))
      if sys.implementation.name == "cpython" else "")
try:
    import numpy
    print(numpy.get_include())
except Exception:
    print("")
try:
    import nanobind
    print(os.path.dirname(nanobind.__file__))
except Exception:
    print("")
"""

# The source list of nanobind's own CMake build (nanobind_build_library); nb_backend.cpp,
# nb_combined.cpp and nb_ft.cpp are not part of a regular build.
_NANOBIND_SRCS = [
    "nb_internals.cpp",
    "nb_func.cpp",
    "nb_type.cpp",
    "nb_enum.cpp",
    "nb_ndarray.cpp",
    "nb_static_property.cpp",
    "nb_datetime.cpp",
    "common.cpp",
    "error.cpp",
    "trampoline.cpp",
    "implicit.cpp",
]

def probe_python(rctx, rule, probe):
    """The output of `probe` (Python source) run by $PYTHON_BIN_PATH, else the python3 on PATH;
    `rule` names the repository rule in its failures."""
    python = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not python:
        fail("%s: no python3 on PATH and PYTHON_BIN_PATH is unset" % rule)
    res = rctx.execute([str(python), "-c", probe])
    if res.return_code != 0:
        fail("%s: probing %s failed:\n%s" % (rule, python, res.stderr))
    return res

def _local_python_impl(rctx):
    res = probe_python(rctx, "local_python", _PY_PROBE)
    exe, inc, ext_suffix, wheel_tag, np_inc, nb_dir = (res.stdout.strip("\n").split("\n") + ["", ""])[:6]
    if not nb_dir:
        fail("local_python: nanobind is not installed for %s; run tools/bootstrap.sh" % exe)
    rctx.symlink(inc, "python_include")
    rctx.symlink(nb_dir, "nanobind_pkg")
    rctx.file("defs.bzl", "\n".join([
        "PYTHON = %r" % exe,
        "PY_EXT_SUFFIX = %r" % ext_suffix,
        "PY_WHEEL_TAG = %r" % wheel_tag,
        "NUMPY_INCLUDE = %r" % np_inc,
        "NANOBIND_DIR = %r" % nb_dir,
        "",
    ]))
    rctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{exe}",
    python_version = "PY3",
    stub_shebang = "#!{exe}",
)

py_runtime_pair(name = "py_runtime_pair", py3_runtime = ":py3_runtime")

toolchain(
    name = "py_toolchain",
    toolchain = ":py_runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "nanobind",
    srcs = ["nanobind_pkg/src/" + f for f in {srcs}] + glob(["nanobind_pkg/src/*.h"]),
    hdrs = glob(["nanobind_pkg/include/**/*.h", "nanobind_pkg/ext/robin_map/include/**/*.h"]),
    includes = ["nanobind_pkg/include", "nanobind_pkg/ext/robin_map/include"],
    copts = ["-fvisibility=hidden", "-fno-strict-aliasing", "-ffunction-sections",
             "-fdata-sections", "-DNB_COMPACT_ASSERTIONS"],
    local_defines = ["NB_BUILD"],
    deps = [":python_headers"],
)
""".format(exe = exe, srcs = repr(_NANOBIND_SRCS)))

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["PYTHON_BIN_PATH", "PATH"],
    local = True,
)

def _find_nvcc(rctx):
    env = rctx.os.environ
    if env.get("NFN_DISABLE_CUDA", "0") not in ("", "0"):
        return None
    for var in ["NFN_CUDA_PATH", "CUDA_PATH"]:
        root = env.get(var, "")
        if root:
            if rctx.path(root + "/bin/nvcc").exists:
                return root + "/bin/nvcc"
            fail("local_cuda: %s=%s has no bin/nvcc" % (var, root))
    found = rctx.which("nvcc")
    if found:
        return str(found)
    if rctx.path("/usr/local/cuda/bin/nvcc").exists:
        return "/usr/local/cuda/bin/nvcc"
    return None

def _local_cuda_impl(rctx):
    nvcc = _find_nvcc(rctx)
    cuda_path, cuda_version = "", ""
    if nvcc:
        # nvcc may be a wrapper script (/usr/local/bin/nvcc here): ask the real one for its
        # toolkit root instead of guessing from the path.
        rctx.file("probe.cu", "")
        res = rctx.execute([nvcc, "--dryrun", "-c", "probe.cu", "-o", "/dev/null"])
        top = [l for l in (res.stdout + res.stderr).splitlines() if l.startswith("#$ TOP=")]
        if not top:
            fail("local_cuda: no TOP= line in `%s --dryrun` output:\n%s" % (nvcc, res.stderr))
        cuda_path = str(rctx.path(top[0][len("#$ TOP="):].strip()).realpath)
        # The toolkit's release and build, which nvcc's commands carry (tools/cuda.bzl): the
        # same nvcc path after a toolkit upgrade must not reuse cached objects.
        res = rctx.execute([nvcc, "--version"])
        lines = [l.strip() for l in res.stdout.splitlines() if l.startswith(("Cuda compilation tools", "Build "))]
        if res.return_code != 0 or not lines:
            fail("local_cuda: `%s --version` names no release:\n%s" % (nvcc, res.stdout + res.stderr))
        cuda_version = "; ".join(lines)
        rctx.symlink(cuda_path + "/include", "cuda_include")
        # The runtime the CUDA op library links (libcudart.so.N), for the wheel to bundle.
        for lib in rctx.path(cuda_path + "/lib64").readdir():
            if lib.basename.startswith("libcudart.so."):
                rctx.symlink(lib, "runtime/" + lib.basename)
    rctx.file("defs.bzl", "\n".join([
        "HAS_CUDA = %r" % (nvcc != None),
        "NVCC = %r" % (nvcc or ""),
        "CUDA_PATH = %r" % cuda_path,
        "CUDA_VERSION = %r" % cuda_version,
        "# target_compatible_with for CUDA targets: //... skips them when CUDA is absent",
        "CUDA_COMPATIBLE = %r" % ([] if nvcc else ["@local_cuda//:cuda_unavailable"]),
        "",
    ]))
    if nvcc:
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])
cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda_include/**/*.h", "cuda_include/**/*.hpp", "cuda_include/nv/**"]),
    includes = ["cuda_include"],
)
cc_library(
    name = "cudart",
    deps = [":cuda_headers"],
    linkopts = ["-L{p}/lib64", "-Wl,-rpath,{p}/lib64", "-lcudart"],
)
filegroup(name = "runtime", srcs = glob(["runtime/*"]))
""".format(p = cuda_path))
    else:
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl"])
# A constraint no platform satisfies: targets that carry it are skipped by //...
constraint_setting(name = "cuda_setting")
constraint_value(name = "cuda_unavailable", constraint_setting = ":cuda_setting")
cc_library(name = "cuda_headers", target_compatible_with = [":cuda_unavailable"])
cc_library(name = "cudart", target_compatible_with = [":cuda_unavailable"])
filegroup(name = "runtime")
""")

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["NFN_DISABLE_CUDA", "NFN_CUDA_PATH", "CUDA_PATH", "PATH"],
    local = True,
)
