// Shared by attention_forward.cu and attention_backward.cu: the qkv layout, tile sizes,
// argument checks and the dispatch over dtype and head size.
#pragma once

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

namespace nfn::cuda::attention {

constexpr int kRows = 64;  // queries (forward, dq) or keys (dk, dv) per block: one per thread

// Keys per shared-memory tile; smaller for wide heads so the register arrays fit.
template <int HD>
constexpr int tile_keys() { return HD <= 64 ? 32 : 16; }

// Where head h's q, k and v of time step t live in qkv (B,T,3C).
struct QkvIndex {
  int T, C, NH;
  __device__ size_t q(int b, int h, int t, int hd) const {
    return (static_cast<size_t>(b) * T + t) * 3 * C + static_cast<size_t>(h) * hd;
  }
};

// Rejects bad shapes and head sizes without a kernel; *head_dim = C / NH.
inline nfn_status check_args(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH,
                             nfn_dtype dtype, int* head_dim) {
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
    return nfn::cuda::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B=%d T=%d C=%d NH=%d must be positive",
                           op, B, T, C, NH);
  if (C % NH != 0)
    return nfn::cuda::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  if (B * NH > 65535)
    return nfn::cuda::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*NH=%d exceeds 65535", op, B * NH);
  *head_dim = C / NH;
  if (*head_dim != 16 && *head_dim != 32 && *head_dim != 64 && *head_dim != 128)
    return nfn::cuda::fail(ctx, NFN_ERR_UNSUPPORTED,
                           "%s: head size C/NH=%d is not one of 16, 32, 64, 128", op, *head_dim);
  if (ctx->attention != nfn_attention_path::flash_simt)
    return nfn::cuda::fail(ctx, NFN_ERR_UNSUPPORTED,
                           "%s: only the flash_simt attention path is built", op);
  return NFN_OK;
}

// Calls fn<T, HD> for the run-time dtype and head size (checked beforehand).
#define NFN_ATTENTION_DISPATCH(fn, dtype, hd, ...)                   \
  NFN_DISPATCH(dtype, E, {                                           \
    switch (hd) {                                                    \
      case 16: return fn<E, 16>(__VA_ARGS__);                        \
      case 32: return fn<E, 32>(__VA_ARGS__);                        \
      case 64: return fn<E, 64>(__VA_ARGS__);                        \
      default: return fn<E, 128>(__VA_ARGS__);                       \
    }                                                                \
  })

}  // namespace nfn::cuda::attention
