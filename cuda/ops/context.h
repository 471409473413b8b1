// The CUDA backend's context and the helpers every CUDA op shares.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cc/ops/nfn_tile_ops.h"

struct nfn_ctx {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::string last_error;
};

namespace nfn::cuda {

nfn_status fail(nfn_ctx* ctx, nfn_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Turns a CUDA error into a status with "<op>: <cuda message>" on the context.
nfn_status check(nfn_ctx* ctx, cudaError_t err, const char* op);

inline unsigned grid_for(size_t n, unsigned block) {
  size_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65535u * 16u ? blocks : 65535u * 16u);
}

}  // namespace nfn::cuda

#define NFN_CUDA_TRY(ctx, expr, op)                                   \
  do {                                                                \
    nfn_status nfn_status_ = nfn::cuda::check((ctx), (expr), (op));   \
    if (nfn_status_ != NFN_OK) return nfn_status_;                    \
  } while (0)
