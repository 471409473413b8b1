// Execution contexts for the CUDA emulator's threads: each emulated GPU thread runs on its
// own stack and hands control back and forth with the block scheduler (runtime.cc). On
// x86-64 a switch saves the callee-saved registers and the stack pointer (no system call);
// elsewhere it falls back to ucontext.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace nfn_emu {

struct FiberContext {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// Makes `ctx` start entry() on [stack, stack + bytes) when it is first switched to. entry
// must never return: it ends by switching away for good.
void prepare_context(FiberContext* ctx, char* stack, size_t bytes, void (*entry)());

// Saves the running context in `from` and resumes `to`.
void switch_context(FiberContext* from, FiberContext* to);

}  // namespace nfn_emu
