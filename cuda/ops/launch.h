// Every kernel of the library is launched by launch_kernel and starts with pdl_begin(), so
// that any launch may be a programmatic dependent launch (PDL, sm_90 and later; option
// pdl=on): the GPU may then start a kernel's blocks while the kernel before it in the
// stream finishes, instead of after, and each block waits in pdl_begin until that kernel's
// writes are visible. Whatever a kernel does before pdl_begin must not touch global memory,
// so pdl_begin comes first. The CUDA emulator (cuda/emu) runs launches one after another,
// and stops a kernel launched this way whose threads reach a barrier, a warp-wide operation,
// cp.async, or their end without pdl_begin.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/ops/context.h"

namespace nfn::cuda {

// Waits until the kernel this one depends on has finished and its writes are visible (at
// once on a launch without PDL), then lets the kernel after this one start its blocks,
// which wait here in turn: so a dependent's blocks fill SMs only during this kernel's last
// wave, and no kernel runs ahead of its predecessor's writes.
__device__ __forceinline__ void pdl_begin() {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::pdl_begin();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#ifndef NFN_CUDA_EMULATION
// kernel<<<grid, block, shared, ctx->stream>>>(args...), with programmatic stream
// serialization where ctx->pdl is on. Errors reach cudaGetLastError, as a <<<>>> launch's
// do. The emulator's build rewrites each call (cuda/emu/rewrite_cu.py), so this is the GPU's.
template <typename... Params, typename... Args>
void launch_kernel(const nfn_ctx* ctx, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                   Args&&... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = ctx->stream;
  config.attrs = &attribute;
  config.numAttrs = ctx->pdl ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif

}  // namespace nfn::cuda
