// Shared by the attention kernels: the qkv layout, tile sizes, argument checks, the dispatch
// over dtype and head size, and the entry points of the tensor-core path.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "cc/ops/attention_geometry.h"
#include "cuda/ops/attention_cudnn.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/tk/bridge.h"

namespace nfn::cuda::attention {

constexpr int kRows = 64;  // queries (forward, dq) or keys (dk, dv) per block: one per thread
constexpr int kMaxHeadDim = 128;  // the widest flash_simt instantiation

// The flash_simt kernels are instantiated for a width HD of 16, 32, 64 or 128 (the size of
// their per-thread register arrays and shared-memory rows); a head of hd channels runs the
// smallest at least hd. Where hd < HD (kTail) the kernels take hd at run time: the dims past
// it are zero in registers and shared memory, so they add exactly zero to every dot product
// and accumulate zeros, and they are never loaded or stored in global memory. Where hd == HD
// (!kTail) head_size<HD, false> folds to the constant and the code is that of a kernel of one
// head size only.
template <int HD, bool kTail>
__host__ __device__ constexpr int head_size(int hd) { return kTail ? hd : HD; }

// Keys per shared-memory tile; smaller for wide heads so the register arrays fit.
template <int HD>
constexpr int tile_keys() { return HD <= 64 ? 32 : 16; }

// Where the heads of time step t live in qkv (B,T,(NH+2*NKV)*hd) and out (B,T,NH*hd), and which
// keys a query sees. Query head h reads kv head h / group(); the row offsets take the head
// size hd as an argument so that a kernel of one width folds it to a constant.
struct QkvIndex {
  int T, NH, NKV;
  int C;       // NH * hd: the q heads' columns, and a row of out and dout
  int ld;      // (NH + 2 * NKV) * hd: a row of qkv
  int window;  // 0, or the sliding window: query t sees keys [t - window, t]
  QkvIndex(int T, int NH, int NKV, int hd, int window)
      : T(T), NH(NH), NKV(NKV), C(NH * hd), ld((NH + 2 * NKV) * hd), window(window) {}
  __host__ __device__ int group() const { return NH / NKV; }
  __device__ size_t row(int b, int t) const { return (static_cast<size_t>(b) * T + t) * ld; }
  __device__ size_t q(int b, int h, int t, int hd) const { return row(b, t) + static_cast<size_t>(h) * hd; }
  __device__ size_t k(int b, int kv, int t, int hd) const { return row(b, t) + C + static_cast<size_t>(kv) * hd; }
  __device__ size_t v(int b, int kv, int t, int hd) const { return k(b, kv, t, hd) + static_cast<size_t>(NKV) * hd; }
  __device__ size_t out(int b, int h, int t, int hd) const {
    return (static_cast<size_t>(b) * T + t) * C + static_cast<size_t>(h) * hd;
  }
  // The first key query t sees.
  __device__ int first_key(int t) const { return nfn::attention::first_key(t, window); }
  // Whether query i sees key j (j <= i assumed): inside the window.
  __device__ bool in_window(int i, int j) const { return window == 0 || i - j <= window; }
  // One past the last query that sees a key before key_end.
  __device__ int query_end(int key_end) const { return window > 0 && window < T - key_end ? key_end + window : T; }
  // Every query head has a kv head of its own and sees every earlier key: the (B,T,3C) layout
  // and causal mask of the paths that take nothing else (cuDNN, ThunderKittens).
  bool plain() const { return NKV == NH && (window == 0 || window >= T); }
};

// Rejects bad geometry (the libraries' shared checks, then the grid's limit) and head sizes
// above 128 without a kernel.
inline nfn_status check_args(nfn_ctx* ctx, const char* op, int B, int T, int NH, int NKV, int HD, int window,
                             nfn_dtype dtype) {
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::attention::check_args(op, B, T, NH, NKV, HD, window);
  if (!why.empty()) return nfn::cuda::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  if (static_cast<long>(B) * NH > 65535)
    return nfn::cuda::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*NH=%ld exceeds 65535", op,
                           static_cast<long>(B) * NH);
  if (HD > kMaxHeadDim)
    return nfn::cuda::fail(ctx, NFN_ERR_UNSUPPORTED, "%s: head dim HD=%d exceeds %d", op, HD, kMaxHeadDim);
  return NFN_OK;
}

// nfn's tensor-core paths cover bf16 with 16-byte aligned tensors (they move 16-byte pieces):
// flash_mma (attention_mma_*.cu) head sizes in 16s up to 128 (the m16n8k16 instruction's k
// is 16), thunderkittens (cuda/tk) 64 and 128 with T a multiple of 64; cudnn
// (attention_cudnn.cc) head sizes in 8s, below. cudnn and thunderkittens take only plain()
// calls: under them, flash_mma runs grouped-query heads and sliding windows where it applies.
// Every other call under those options runs the flash_simt kernels.
inline bool use_mma(const nfn_ctx* ctx, nfn_dtype dtype, int head_dim, const QkvIndex& ix,
                    std::initializer_list<const void*> tensors) {
  const nfn_attention_path path = ctx->attention;
  const bool plain_only = path == nfn_attention_path::cudnn || path == nfn_attention_path::thunderkittens;
  const bool chosen = path == nfn_attention_path::flash_mma || (plain_only && !ix.plain());
  return chosen && dtype == NFN_BF16 && head_dim % 16 == 0 && head_dim <= 128 && aligned16(tensors);
}

// cuDNN's SDPA takes bf16 with any head size that is a multiple of 8 up to 128 (its support
// matrix: 128 for the backward on Ampere and Ada, 256 on Hopper; 8 keeps every head's start
// 16-byte aligned in qkv) and 16-byte aligned tensors. Its frontend refuses a sequence of one
// (T=1) in the backward, and before 9.10 a causal one in the forward: those run flash_simt.
inline bool use_cudnn(const nfn_ctx* ctx, nfn_dtype dtype, int head_dim, const QkvIndex& ix,
                      std::initializer_list<const void*> tensors) {
  return ctx->attention == nfn_attention_path::cudnn && ix.plain() && ix.T > 1 && dtype == NFN_BF16 &&
         head_dim % 8 == 0 && head_dim <= 128 && aligned16(tensors);
}

inline bool use_tk(const nfn_ctx* ctx, nfn_dtype dtype, int head_dim, const QkvIndex& ix,
                   std::initializer_list<const void*> tensors) {
  return ctx->attention == nfn_attention_path::thunderkittens && ix.plain() && dtype == NFN_BF16 &&
         aligned16(tensors) && nfn_tk_attention_applies(ix.T, head_dim);
}

// Returns fn<HD>(args...) for a head size hd in 16s up to 128 (use_mma's: the flash_mma
// kernels are built for each); falls through for any other.
#define NFN_MMA_HEAD_DISPATCH(fn, hd, ...)                                                          \
  switch (hd) {                                                                                     \
    case 16: return fn<16>(__VA_ARGS__);                                                            \
    case 32: return fn<32>(__VA_ARGS__);                                                            \
    case 48: return fn<48>(__VA_ARGS__);                                                            \
    case 64: return fn<64>(__VA_ARGS__);                                                            \
    case 80: return fn<80>(__VA_ARGS__);                                                            \
    case 96: return fn<96>(__VA_ARGS__);                                                            \
    case 112: return fn<112>(__VA_ARGS__);                                                          \
    case 128: return fn<128>(__VA_ARGS__);                                                          \
  }

// out (B,T,NH*hd) and lse (B*NH*T) from qkv, bf16, head size hd in 16s up to 128.
nfn_status mma_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, const QkvIndex& ix, int hd);

// dqkv (qkv's layout, overwritten) from dout, qkv, lse and delta = rowsum(dout * out) (B*NH*T).
nfn_status mma_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const float* lse,
                        const float* delta, int B, const QkvIndex& ix, int hd);

// Calls fn<T, HD, kTail> for the run-time dtype and head size hd (checked beforehand: 1 to
// 128): HD the smallest of 16, 32, 64, 128 at least hd, kTail where hd falls short of it.
#define NFN_ATTENTION_DISPATCH(fn, dtype, hd, ...)                   \
  NFN_DISPATCH(dtype, E, {                                           \
    switch (hd) {                                                    \
      case 16: return fn<E, 16, false>(__VA_ARGS__);                 \
      case 32: return fn<E, 32, false>(__VA_ARGS__);                 \
      case 64: return fn<E, 64, false>(__VA_ARGS__);                 \
      case 128: return fn<E, 128, false>(__VA_ARGS__);               \
    }                                                                \
    if ((hd) < 16) return fn<E, 16, true>(__VA_ARGS__);              \
    if ((hd) < 32) return fn<E, 32, true>(__VA_ARGS__);              \
    if ((hd) < 64) return fn<E, 64, true>(__VA_ARGS__);              \
    return fn<E, 128, true>(__VA_ARGS__);                            \
  })

}  // namespace nfn::cuda::attention
