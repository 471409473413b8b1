// LayerNorm and RMSNorm, one kernel template each way (kCentered: LayerNorm, which subtracts
// the mean and may add a bias). A warp owns a row; statistics are f32; rows move 16 bytes a
// load where C and the pointers allow it (Pack), one element a load otherwise.
//
// The backward reads dout and inp once: each warp adds its rows' input gradient to dinp and
// sums the weight and bias gradient terms of its rows into its own columns in shared memory;
// each block then adds its warps' columns, in warp order, into an f32 partial, and a last
// kernel adds the blocks' partials, in a fixed order, to dweight and dbias (column_reduce.cuh).
// Rows go to blocks and warps by a fixed rule, so the result is deterministic.
#include <algorithm>

#include "cuda/ops/column_reduce.cuh"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;
using nfn::cuda::warp_sum;

namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;            // warps per block, one row at a time each
// At most, in the backward: one wave of 4 per SM on an H200 (132 SMs; 48 KiB of shared memory
// and 256 threads of at most 56 registers a block fit 4). 256 (2 per SM) ran GPT-2's
// 16384 x 768 rows in 57 us on an H200 (2026-11-30), 1.75 TB/s: too few loads in flight.
constexpr int kBackwardBlocks = 512;
constexpr size_t kDefaultShared = 48 << 10;  // dynamic shared memory without opting in

// Forward: out = (x - mean) * rstd * weight + bias (LayerNorm) or x * rstd * weight
// (RMSNorm, mean 0, no bias); weight NULL reads as 1, bias NULL as 0. V elements a load.
template <bool kCentered, int V, typename T>
__global__ void norm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp, const T* weight,
                                    const T* bias, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x, packs = C / V;
  if (row >= N) return;
  const T* x = inp + static_cast<size_t>(row) * C;
  float mean = 0.f;
  if constexpr (kCentered) {
    float sum = 0.f;
    for (int i = lane; i < packs; i += 32) {
      float v[V];
      load_pack(x, i, v);
      for (int j = 0; j < V; ++j) sum += v[j];
    }
    mean = warp_sum(sum) / C;
  }
  float sq = 0.f;
  for (int i = lane; i < packs; i += 32) {
    float v[V];
    load_pack(x, i, v);
    for (int j = 0; j < V; ++j) sq += (v[j] - mean) * (v[j] - mean);
  }
  const float rstd = rsqrtf(warp_sum(sq) / C + kEps);
  T* y = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < packs; i += 32) {
    float v[V], w[V], b[V];
    load_pack(x, i, v);
    load_pack(weight, i, w, 1.f);
    load_pack(bias, i, b);
    for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * rstd * w[j] + b[j];
    store_pack(y, i, v);
  }
  if (lane == 0) {
    if (mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

// Backward, with xhat = (x - mean) * rstd and dnorm = dout * weight:
//   dinp += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd   (RMSNorm: no mean(dnorm))
//   dweight term dout * xhat, dbias term dout (LayerNorm only): K = 2 or 1 terms a column.
// partials (NULL: no parameter gradients) gets, for each term k and block b, the sum over
// the block's rows at [k][b][c]. Shared memory holds K * C floats a warp; column c sits at
// (c % V) * (C / V) + c / V, so the lanes of a warp touch consecutive words.
template <bool kCentered, int V, typename T>
__global__ void norm_backward_kernel(T* dinp, float* partials, const T* dout, const T* inp, const T* weight,
                                     const float* mean, const float* rstd, int N, int C) {
  constexpr int K = kCentered ? 2 : 1;
  extern __shared__ float cols[];
  const int warps = blockDim.y, lane = threadIdx.x, packs = C / V;
  float* mine = cols + static_cast<size_t>(threadIdx.y) * K * C;
  if (partials != nullptr)
    for (int i = lane; i < packs; i += 32)
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < V; ++j) mine[k * C + j * packs + i] = 0.f;
  for (int row = blockIdx.x * warps + threadIdx.y; row < N; row += gridDim.x * warps) {
    const size_t off = static_cast<size_t>(row) * C;
    const float m = kCentered ? mean[row] : 0.f, r = rstd[row];
    float dnorm_sum = 0.f, dnorm_xhat_sum = 0.f;
    for (int i = lane; i < packs; i += 32) {
      float g[V], x[V], w[V];
      load_pack(dout + off, i, g);
      load_pack(inp + off, i, x);
      load_pack(weight, i, w, 1.f);
      for (int j = 0; j < V; ++j) {
        dnorm_sum += g[j] * w[j];
        dnorm_xhat_sum += g[j] * w[j] * (x[j] - m) * r;
      }
    }
    const float dnorm_mean = kCentered ? warp_sum(dnorm_sum) / C : 0.f;
    const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
    for (int i = lane; i < packs; i += 32) {  // the row again, from L1
      float g[V], x[V], w[V], d[V];
      load_pack(dout + off, i, g);
      load_pack(inp + off, i, x);
      load_pack(weight, i, w, 1.f);
      if (dinp != nullptr) {
        load_pack(dinp + off, i, d);
        for (int j = 0; j < V; ++j)
          d[j] += (g[j] * w[j] - dnorm_mean - (x[j] - m) * r * dnorm_xhat_mean) * r;
        store_pack(dinp + off, i, d);
      }
      if (partials != nullptr)
        for (int j = 0; j < V; ++j) {
          mine[j * packs + i] += g[j] * (x[j] - m) * r;
          if (kCentered) mine[C + j * packs + i] += g[j];
        }
    }
  }
  if (partials == nullptr) return;
  __syncthreads();
  for (int t = threadIdx.y * 32 + lane; t < K * C; t += warps * 32) {
    const int k = t / C, slot = t % C;
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += cols[(static_cast<size_t>(w) * K + k) * C + slot];
    partials[(static_cast<size_t>(k) * gridDim.x + blockIdx.x) * C + (slot % packs) * V + slot / packs] = s;
  }
}

nfn_status check_shape(nfn_ctx* ctx, const char* op, int N, int C) {
  if (N <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d must be positive", op, N, C);
  return NFN_OK;
}

template <bool kCentered, int V, typename T>
void launch_forward(nfn_ctx* ctx, T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                    int N, int C) {
  norm_forward_kernel<kCentered, V><<<(N + kRowsPerBlock - 1) / kRowsPerBlock, dim3(32, kRowsPerBlock), 0,
                                      ctx->stream>>>(out, mean, rstd, inp, weight, bias, N, C);
}

template <bool kCentered, typename T>
nfn_status norm_forward(nfn_ctx* ctx, const char* op, void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int N, int C) {
  auto* y = static_cast<T*>(out);
  const auto *x = static_cast<const T*>(inp), *w = static_cast<const T*>(weight), *b = static_cast<const T*>(bias);
  if (nfn::cuda::rows_packed<T>(C, {out, inp, weight, bias}))
    launch_forward<kCentered, Pack<T>::n>(ctx, y, mean, rstd, x, w, b, N, C);
  else
    launch_forward<kCentered, 1>(ctx, y, mean, rstd, x, w, b, N, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

template <bool kCentered, int V, typename T>
nfn_status launch_backward(nfn_ctx* ctx, const char* op, int blocks, int warps, size_t shared, T* dinp,
                           float* partials, const T* dout, const T* inp, const T* weight, const float* mean,
                           const float* rstd, int N, int C) {
  if (shared > kDefaultShared)
    NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(norm_backward_kernel<kCentered, V, T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
                 op);
  norm_backward_kernel<kCentered, V, T><<<blocks, dim3(32, warps), shared, ctx->stream>>>(
      dinp, partials, dout, inp, weight, mean, rstd, N, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

// dinp (may be NULL) += the input gradient; dweight and dbias (either may be NULL; no dbias
// for RMSNorm) += the parameter gradients.
template <bool kCentered, typename T>
nfn_status norm_backward(nfn_ctx* ctx, const char* op, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd, int N, int C) {
  constexpr int K = kCentered ? 2 : 1;
  const bool params = dweight != nullptr || dbias != nullptr;
  // A warp's columns take K * C floats; as many warps as fit in the default 48 KiB (up to
  // kRowsPerBlock), else one warp with more, opted into (an H200 allows 227 KiB).
  const size_t warp_bytes = params ? sizeof(float) * K * C : 0;
  const int warps =
      params ? static_cast<int>(std::clamp<size_t>(kDefaultShared / warp_bytes, 1, kRowsPerBlock)) : kRowsPerBlock;
  const size_t shared = warp_bytes * warps;
  const int blocks = std::min((N + warps - 1) / warps, kBackwardBlocks);
  float* partials = nullptr;
  if (params) {
    void* buf = nullptr;
    NFN_TRY(nfn::cuda::scratch(ctx, sizeof(float) * K * blocks * static_cast<size_t>(C), &buf, op));
    partials = static_cast<float*>(buf);
  }
  auto* di = static_cast<T*>(dinp);
  const auto *g = static_cast<const T*>(dout), *x = static_cast<const T*>(inp), *w = static_cast<const T*>(weight);
  if (nfn::cuda::rows_packed<T>(C, {dinp, dout, inp, weight}))
    NFN_TRY((launch_backward<kCentered, Pack<T>::n>(ctx, op, blocks, warps, shared, di, partials, g, x, w, mean,
                                                    rstd, N, C)));
  else
    NFN_TRY((launch_backward<kCentered, 1>(ctx, op, blocks, warps, shared, di, partials, g, x, w, mean, rstd, N, C)));
  if (!params) return NFN_OK;
  nfn::cuda::ColumnDsts<T, K> dsts{{static_cast<T*>(dweight)}};
  if constexpr (kCentered) dsts.p[1] = static_cast<T*>(dbias);
  return nfn::cuda::add_partials(ctx, op, dsts, partials, blocks, C);
}

}  // namespace

extern "C" {

nfn_status nfn_layernorm_forward(nfn_ctx* ctx, void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C,
                                 nfn_dtype dtype) {
  const char* op = "layernorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr || weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, inp or weight", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = norm_forward<true, E>(ctx, op, out, mean, rstd, inp, weight, bias, N, C));
  return s;
}

nfn_status nfn_layernorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias,
                                  const void* dout, const void* inp, const void* weight,
                                  const float* mean, const float* rstd, int N, int C,
                                  nfn_dtype dtype) {
  const char* op = "layernorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (dout == nullptr || inp == nullptr || weight == nullptr || mean == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout, inp, weight, mean or rstd", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E,
               s = norm_backward<true, E>(ctx, op, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
  return s;
}

nfn_status nfn_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp,
                               const void* weight, int N, int C, nfn_dtype dtype) {
  const char* op = "rmsnorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = norm_forward<false, E>(ctx, op, out, nullptr, rstd, inp, weight, nullptr, N, C));
  return s;
}

nfn_status nfn_rmsnorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int N,
                                int C, nfn_dtype dtype) {
  const char* op = "rmsnorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (dout == nullptr || inp == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout, inp or rstd", op);
  if (dweight != nullptr && weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dweight given but weight is NULL", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E,
               s = norm_backward<false, E>(ctx, op, dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C));
  return s;
}

}  // extern "C"
