"""Compiler options of the CPU op library, shared with the tests that compile its headers."""

# -fno-trapping-math and -fno-math-errno let loops with clamps and sqrt vectorize; neither
# reorders arithmetic, so results stay what the source says.
CPU_OPS_COPTS = ["-fopenmp", "-march=x86-64-v3", "-O3", "-fno-trapping-math", "-fno-math-errno"]
