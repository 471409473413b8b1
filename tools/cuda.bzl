"""cuda_library: nvcc compiles each .cu to an object (a genrule), then a cc_library links them.

Without CUDA the targets carry an unsatisfiable constraint, so `bazel test //...` skips them.
"""

load("@local_cuda//:defs.bzl", "CUDA_COMPATIBLE", "NVCC")

# Hopper (H100/H200) with wgmma, and Blackwell consumer parts (RTX 50xx); PTX for newer GPUs.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_120,code=sm_120",
    "-gencode=arch=compute_120,code=compute_120",
]

def cuda_library(
        name,
        srcs,
        hdrs = [],
        deps = [],
        compile_inputs = [],
        nvcc_flags = [],
        arch_flags = CUDA_ARCH_FLAGS,
        std = "c++17",
        **kwargs):
    """compile_inputs: other headers the .cu files include (nvcc runs outside cc rules).

    srcs may list private headers (.h, .cuh): every .cu file sees them. std: the C++ dialect.
    """
    objs = []
    for src in [s for s in srcs if s.endswith(".cu")]:
        obj = "_objs/%s/%s.o" % (name, src.rsplit(".", 1)[0])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + compile_inputs + [h for h in srcs if h.endswith((".h", ".cuh"))],
            outs = [obj],
            cmd = " ".join([
                NVCC, "-c", "-std=" + std, "-O3", "--expt-relaxed-constexpr",
                "-Xcompiler", "-fPIC", "-I.", "-I$(GENDIR)",
            ] + arch_flags + nvcc_flags + ["-o", "$@", "$(location %s)" % src]),
            target_compatible_with = CUDA_COMPATIBLE,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )
