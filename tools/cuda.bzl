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
        **kwargs):
    """compile_inputs: other headers the .cu files include (nvcc runs outside cc rules)."""
    objs = []
    for src in srcs:
        obj = "_objs/%s/%s.o" % (name, src.rsplit(".", 1)[0])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + compile_inputs,
            outs = [obj],
            cmd = " ".join([
                NVCC, "-c", "-std=c++17", "-O3", "--expt-relaxed-constexpr",
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
