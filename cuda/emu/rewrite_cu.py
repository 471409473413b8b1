"""Turns a .cu file into C++ the CUDA emulator (cuda/emu) compiles with a host compiler.

Six rewrites, nothing else changes:
  kernel<<<grid, block[, shared[, stream]]>>>(args)
      -> ::nfn_emu::launch("kernel", ::nfn_emu::launch_config(grid, block...), [=] { kernel(args); })
  [nfn::cuda::]launch_kernel(ctx, kernel, grid, block, shared, args) (cuda/ops/launch.h)
      -> ::nfn_emu::launch("kernel", ::nfn_emu::launch_config(grid, block, shared, (ctx)->stream, true),
                           [=] { kernel(args); })   (true: its threads must call pdl_begin first)
  extern __shared__ [__align__(n)] T name[];
      -> T* name = static_cast<T*>(::nfn_emu::dynamic_shared());
  __shared__ [__align__(n)] T a[X][Y], b[Z];
      -> static char nfn_emu_key_a; T (&a)[X][Y] = *static_cast<T(*)[X][Y]>(
             ::nfn_emu::static_shared(&nfn_emu_key_a, sizeof(T[X][Y]), n)); (and b alike)
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n)
      -> ::nfn_emu::set_max_dynamic_shared("kernel", n) (limits are per kernel name)
  #include "cuda/ops/NAME.cuh"  ->  #include "cuda/ops/emu/NAME.cuh.h" (its rewritten copy)

In cuda/ops (the op library, whose every kernel launch_kernel may launch with PDL), a
__global__ function whose body does not begin with nfn::cuda::pdl_begin(); stops the build.

usage: rewrite_cu.py IN.cu|IN.cuh OUT
"""

import re
import sys

CUH_INCLUDE = re.compile(r'#include "cuda/ops/(\w+\.cuh)"')
SET_ATTRIBUTE = re.compile(r"cudaFuncSetAttribute\(\s*([\w:]+(?:\s*<[^<>]*>)?)\s*,\s*cudaFuncAttributeMaxDynamicSharedMemorySize\s*,")
# Declarations start a line and end on it, so a comment that mentions __shared__ is left alone.
STATIC_SHARED = re.compile(r"^([ \t]*)__shared__\s+(?:__align__\((\d+)\)\s+)?([\w:]+)\s+([^;\n]+);", re.M)
DYNAMIC_SHARED = re.compile(r"^([ \t]*)extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;",
                            re.M)


def fail(path, text, pos, what):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"{path}:{line}: {what}")


def matching(text, pos, open_ch, close_ch, step):
    """Index of the bracket that closes the one at pos, scanning by step (+1 or -1)."""
    depth = 0
    i = pos
    while 0 <= i < len(text):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += step
    return -1


def callee_start(text, end):
    """Start of the kernel expression that ends just before `end`: a name, maybe
    qualified, maybe with template arguments."""
    i = end
    if text[i - 1] == ">":
        i = matching(text, i - 1, ">", "<", -1)
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def split_top_level(text):
    """text split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def static_shared(match):
    indent, type_, declarators = match.group(1), match.group(3), match.group(4)
    align = match.group(2) or f"alignof({type_})"
    out = []
    for decl in split_top_level(declarators):
        decl = decl.strip()
        name = re.match(r"\w+", decl).group(0)
        dims = decl[len(name):].strip()
        ref, ptr = (f"(&{name}){dims}", f"(*){dims}") if dims else (f"&{name}", "*")
        out.append(f"static char nfn_emu_key_{name}; {type_} {ref} = *static_cast<{type_}{ptr}>("
                   f"::nfn_emu::static_shared(&nfn_emu_key_{name}, sizeof({type_}{dims}), {align}));")
    return indent + " ".join(out)


LAUNCH_KERNEL = re.compile(r"(?:(?:::)?nfn::cuda::)?\blaunch_kernel\s*\(")


def rewrite_launch_kernel(path, text):
    """Each launch_kernel(ctx, kernel, grid, block, shared, args...) call as the emulator's launch."""
    out, pos = [], 0
    for match in LAUNCH_KERNEL.finditer(text):
        if match.start() < pos:
            continue
        if "//" in text[text.rfind("\n", 0, match.start()) + 1:match.start()]:  # in a line comment
            continue
        args_open = match.end() - 1
        args_close = matching(text, args_open, "(", ")", 1)
        if args_close < 0:
            fail(path, text, match.start(), "unbalanced parentheses in launch_kernel")
        # The first five arguments, split at top-level commas; the kernel's own as they are.
        firsts, depth, start, i = [], 0, args_open + 1, args_open + 1
        while len(firsts) < 5 and i < args_close:
            ch = text[i]
            if ch in "([<":
                depth += 1
            elif ch in ")]>":
                depth -= 1
                if depth < 0:
                    fail(path, text, i, "cannot split launch_kernel's arguments (a bare < or >?)")
            elif ch == "," and depth == 0:
                firsts.append(text[start:i].strip())
                start = i + 1
            i += 1
        if len(firsts) < 5:
            fail(path, text, match.start(), "launch_kernel needs ctx, kernel, grid, block, shared and the arguments")
        ctx, kernel, grid, block, shared = firsts
        name = re.sub(r"\s+", " ", kernel)
        out.append(text[pos:match.start()])
        out.append(f'::nfn_emu::launch("{name}", ::nfn_emu::launch_config({grid}, {block}, {shared}, '
                   f"({ctx})->stream, true), [=] {{ {kernel}({text[start:args_close].strip()}); }})")
        pos = args_close + 1
    return "".join(out) + text[pos:]


KERNEL = re.compile(r"^__global__\s", re.M)
NAME_AND_PARAMS = re.compile(r"(\w+)\s*\(")
PDL_BEGIN = "nfn::cuda::pdl_begin();"


def check_pdl_begin(path, text):
    """Every kernel's body begins with pdl_begin (cuda/ops/launch.h): nothing it does before
    may touch global memory, which the emulator cannot see."""
    for match in KERNEL.finditer(text):
        name = NAME_AND_PARAMS.search(text, match.end())
        while name and name.group(1) == "__launch_bounds__":
            name = NAME_AND_PARAMS.search(text, matching(text, name.end() - 1, "(", ")", 1) + 1)
        if name is None:
            fail(path, text, match.start(), "cannot parse this kernel")
        body = text.find("{", matching(text, name.end() - 1, "(", ")", 1))
        if not text[body + 1:].lstrip().startswith(PDL_BEGIN):
            fail(path, text, match.start(), f"kernel {name.group(1)} does not begin with {PDL_BEGIN} "
                 "(cuda/ops/launch.h: any launch may be a programmatic dependent launch)")


def rewrite(path, text):
    if "cuda/ops/" in path.replace("\\", "/"):
        check_pdl_begin(path, text)
    text = rewrite_launch_kernel(path, text)
    out = []
    pos = 0
    while True:
        launch = text.find("<<<", pos)
        if launch < 0:
            out.append(text[pos:])
            break
        if "//" in text[text.rfind("\n", 0, launch) + 1:launch]:  # in a line comment
            out.append(text[pos:launch + 3])
            pos = launch + 3
            continue
        start = callee_start(text, launch)
        close = text.find(">>>", launch)
        if close < 0 or start == launch:
            fail(path, text, launch, "cannot parse this kernel launch")
        args_open = close + 3
        while text[args_open].isspace():
            args_open += 1
        if text[args_open] != "(":
            fail(path, text, launch, "kernel launch without an argument list")
        args_close = matching(text, args_open, "(", ")", 1)
        if args_close < 0:
            fail(path, text, launch, "unbalanced parentheses in a kernel launch")
        callee = text[start:launch]
        config = text[launch + 3:close]
        args = text[args_open + 1:args_close]
        name = re.sub(r"\s+", " ", callee)
        out.append(text[pos:start])
        out.append(f'::nfn_emu::launch("{name}", ::nfn_emu::launch_config({config}), '
                   f"[=] {{ {callee}({args}); }})")
        pos = args_close + 1
    text = "".join(out)
    text = SET_ATTRIBUTE.sub(lambda m: '::nfn_emu::set_max_dynamic_shared("%s",' % re.sub(r"\s+", " ", m.group(1)),
                             text)
    text = STATIC_SHARED.sub(static_shared, text)
    text = CUH_INCLUDE.sub(r'#include "cuda/ops/emu/\1.h"', text)
    return DYNAMIC_SHARED.sub(r"\1\2* \3 = static_cast<\2*>(::nfn_emu::dynamic_shared());", text)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rewrite_cu.py IN.cu|IN.cuh OUT")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    with open(dst, "w") as f:
        f.write(f'#line 1 "{src}"\n' + rewrite(src, text))


if __name__ == "__main__":
    main()
