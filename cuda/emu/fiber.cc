#include "cuda/emu/fiber.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)

// nfn_emu_switch(void** save_sp, void* load_sp): pushes the System V callee-saved registers
// and the SSE/x87 control words, stores the stack pointer, loads the other one, pops.
extern "C" void nfn_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl nfn_emu_switch
  .hidden nfn_emu_switch
  .type nfn_emu_switch, @function
nfn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size nfn_emu_switch, .-nfn_emu_switch
)");

namespace nfn_emu {

void prepare_context(FiberContext* ctx, char* stack, size_t bytes, void (*entry)()) {
  // From the 16-byte aligned top down: a null return address for entry (it never returns;
  // entry then starts with rsp = 8 mod 16 as after a call), entry as the return address of
  // nfn_emu_switch, six zero registers, and the caller's control words.
  auto top = (reinterpret_cast<uintptr_t>(stack + bytes)) & ~static_cast<uintptr_t>(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;
  *--slot = reinterpret_cast<uint64_t>(entry);
  for (int i = 0; i < 6; ++i) *--slot = 0;
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  --slot;
  std::memcpy(reinterpret_cast<char*>(slot), &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(slot) + 4, &fpcw, 2);
  ctx->sp = slot;
}

void switch_context(FiberContext* from, FiberContext* to) { nfn_emu_switch(&from->sp, to->sp); }

}  // namespace nfn_emu

#else

namespace nfn_emu {

void prepare_context(FiberContext* ctx, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = stack;
  ctx->uc.uc_stack.ss_size = bytes;
  ctx->uc.uc_link = nullptr;
  makecontext(&ctx->uc, entry, 0);
}

void switch_context(FiberContext* from, FiberContext* to) { swapcontext(&from->uc, &to->uc); }

}  // namespace nfn_emu

#endif
