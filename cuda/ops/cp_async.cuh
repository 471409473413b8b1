// cp.async: 16-byte copies from global to shared memory that skip registers, so a thread can
// have many in flight (attention_mma.cuh's tiles, softmax_loss.cu's staged rows). The CUDA
// emulator runs them as copies that land at the wait.
#pragma once

#include <cstdint>

namespace nfn::cuda {

// cp.async.cg.shared.global: 16 bytes from global to shared memory without passing through
// registers, zeros when !valid (src is then not read). Nothing lands until a cp_async_wait
// covers the copy's group, and other threads see it only after a barrier after that.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::cp_async(dst, src, valid ? 16 : 0);
#else
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#endif
}

// Closes the group of this thread's copies issued since the last commit (possibly empty).
__device__ __forceinline__ void cp_async_commit() {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until every group this thread committed, except the newest N, has landed.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace nfn::cuda
