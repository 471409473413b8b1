"""local_licenses: the license texts of what nfn's release bundles, found without downloading.

Provides @local_licenses//:licenses, files under licenses/<component>/, one folder a component:
  onednn     libdnnl.so.3 (the onednn-cpu-gomp package's LICENSE.txt)
  openblas   libscipy_openblas.so (scipy-openblas32's LICENSE.txt, OpenBLAS, LAPACK, libgfortran)
  nanobind   compiled into nfn/_native.so (nanobind's LICENSE)
  libgomp    libgomp.so.1 (Debian's copyright file of libgomp1: GPL-3 with the runtime exception)
  cuda       libcudart.so.N (the CUDA runtime's License.txt), only where CUDA is on and found
tools/build_release.py puts a component's folder in the release when a bundled file needs it
and fails the build when a bundled library has no license here.
"""

load("//tools:local_config.bzl", "probe_python")

_PROBE = """
import importlib.metadata as m, os, sys
for component, dist in [("onednn", "onednn-cpu-gomp"), ("openblas", "scipy-openblas32"),
                        ("nanobind", "nanobind")]:
    try:
        d = m.distribution(dist)
    except m.PackageNotFoundError:
        continue
    for f in d.files or []:
        name = os.path.basename(str(f)).upper()
        if ".dist-info" in str(f) and name.startswith(("LICENSE", "COPYING")):
            print(component, os.path.realpath(d.locate_file(f)))
"""

def _local_licenses_impl(rctx):
    res = probe_python(rctx, "local_licenses", _PROBE)
    found = [line.split(" ", 1) for line in res.stdout.strip().splitlines() if " " in line]
    gomp = rctx.path("/usr/share/doc/libgomp1/copyright")
    if gomp.exists:
        found.append(["libgomp", str(gomp)])
    cuda = str(rctx.path(Label("@local_cuda//:defs.bzl")).dirname)
    for line in rctx.read(cuda + "/defs.bzl").splitlines():
        if line.startswith("CUDA_PATH = ") and line != "CUDA_PATH = ''":
            root = line[len("CUDA_PATH = "):].strip("'\"")
            dist = rctx.path(root + "/dist-info")
            if dist.exists:
                for d in dist.readdir():
                    if d.basename.startswith("nvidia_cuda_runtime-"):
                        found.append(["cuda", str(d) + "/licenses/License.txt"])
            found.append(["cuda", root + "/EULA.txt"])
    for component, path in found:
        if rctx.path(path).exists:
            rctx.symlink(path, "licenses/%s/%s" % (component, path.split("/")[-1]))
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
filegroup(name = "licenses", srcs = glob(["licenses/**"]))
""")

local_licenses = repository_rule(
    implementation = _local_licenses_impl,
    environ = ["PYTHON_BIN_PATH", "PATH", "NFN_DISABLE_CUDA", "NFN_CUDA_PATH", "CUDA_PATH"],
    local = True,
)
