"""cuda_emulated_library: CUDA sources rewritten by rewrite_cu.py and compiled for the CPU
against the emulator's runtime (cuda/emu), so their kernels run without a GPU or nvcc."""

def cuda_emulated_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """srcs: .cu and .cuh files of this package, rewritten to emu/<name>.cc and
    emu/<name>.cuh.h (cc rules know no .cuh)."""
    outs = []
    for src in srcs:
        out = "emu/" + (src[:-3] + ".cc" if src.endswith(".cu") else src + ".h")
        native.genrule(
            name = "%s_%s" % (name, src.replace(".", "_")),
            srcs = [src],
            outs = [out],
            tools = ["//cuda/emu:rewrite_cu"],
            cmd = "$(location //cuda/emu:rewrite_cu) $< $@",
        )
        outs.append(out)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")] + hdrs,
        copts = [
            "-O2",
            "-include",
            "cuda/emu/include/cuda_runtime.h",
            "-Wno-unknown-pragmas",
            # What faults on a GPU, or is undefined, traps here (SIGILL, reported by the
            # runtime): a misaligned vector access, an index past a fixed-size array (shared
            # memory included), signed overflow in index arithmetic, a bad shift.
            "-fsanitize=alignment,bounds,shift,integer-divide-by-zero,signed-integer-overflow",
            "-fsanitize-undefined-trap-on-error",
        ],
        defines = ["NFN_CUDA_EMULATION"],
        deps = deps + ["//cuda/emu:runtime"],
        **kwargs
    )
