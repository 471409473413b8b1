"""cuda_library: nvcc compiles each .cu to an object (a genrule), then a cc_library links them.

Without CUDA the targets carry an unsatisfiable constraint, so `bazel test //...` skips them.
"""

load("@local_cuda//:defs.bzl", "CUDA_COMPATIBLE", "CUDA_VERSION", "NVCC")

# Machine code for Hopper (H100/H200) and Blackwell consumer parts (RTX 50xx); compute_80 PTX
# (the kernels need nothing newer: mma.sync, ldmatrix, cp.async) for the driver to compile at
# load on any other GPU from Ampere on (A100, L4/L40S, B200), untested there.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_120,code=sm_120",
    "-gencode=arch=compute_80,code=compute_80",
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
    Also defines <name>_resource_usage: ptxas's per-kernel report of each .cu file
    (tests/cuda:resource_usage_test reads it).
    """
    objs, usage = [], []
    for src in [s for s in srcs if s.endswith(".cu")]:
        stem = "_objs/%s/%s" % (name, src.rsplit(".", 1)[0])
        obj, log = stem + ".o", stem + ".resource_usage.txt"
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + compile_inputs + [h for h in srcs if h.endswith((".h", ".cuh"))],
            outs = [obj, log],
            # ptxas's resource usage (registers, spills, shared memory per kernel and
            # architecture) goes to the log; anything else nvcc says still reaches stderr.
            # nvcc names its temporary files after its process id, which is the same in
            # every sandbox (a fresh PID namespace), while /tmp is shared: each compile gets
            # a directory of its own, or parallel compiles overwrite each other's files.
            # The toolkit's version leads the command, so it is part of the action's key (and a
            # remote cache's): objects of another toolkit at the same nvcc path are not reused.
            # The target architectures are in the key as arch_flags.
            cmd = " ".join([
                "NFN_CUDA_TOOLKIT=%s" % repr(CUDA_VERSION).replace("$", "$$"),
                "tmp=$$(mktemp -d) &&",
                "TMPDIR=$$tmp", NVCC, "-c", "-std=" + std, "-O3", "--expt-relaxed-constexpr", "--resource-usage",
                "-Xcompiler", "-fPIC", "-I.", "-I$(GENDIR)",
            ] + arch_flags + nvcc_flags + [
                "-o", "$(location %s)" % obj, "$(location %s)" % src, "2> $(location %s)" % log,
                "|| { rm -rf $$tmp; cat $(location %s) >&2; exit 1; };" % log,
                "rm -rf $$tmp;",
                "grep -v -e '^ptxas info' -e 'bytes stack frame' $(location %s) >&2 || true" % log,
            ]),
            target_compatible_with = CUDA_COMPATIBLE,
        )
        objs.append(obj)
        usage.append(log)
    native.filegroup(
        name = name + "_resource_usage",
        srcs = usage,
    )
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )
