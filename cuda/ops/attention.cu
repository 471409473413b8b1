// Causal flash attention of nfn's own ("flash_simt"): tiles of K and V stream through shared
// memory, each thread owns one query (forward, dq) or one key (dk, dv) with f32 math, and
// the (T,T) scores never reach device memory. The backward recomputes probabilities from
// the saved log-sum-exp, in two kernels (keys, then queries) so no gradient needs atomics.
// CUDA cores only: the tensor-core path for sm_90a is future work (docs/cuda.md).
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

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

template <typename T, int HD>
__global__ void __launch_bounds__(kRows) flash_forward_kernel(T* out, float* lse, const T* qkv,
                                                              QkvIndex ix, float scale) {
  constexpr int BC = tile_keys<HD>();
  __shared__ float ks[BC][HD], vs[BC][HD];
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH;
  const int q0 = blockIdx.x * kRows, row = q0 + threadIdx.x;
  const bool active = row < ix.T;
  float q[HD], acc[HD];
  if (active) {
    const T* qrow = qkv + ix.q(b, h, row, HD);
#pragma unroll
    for (int d = 0; d < HD; ++d) q[d] = to_f32(qrow[d]) * scale, acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int kv_end = min(ix.T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += BC) {
    for (int i = threadIdx.x; i < BC * HD; i += kRows) {
      const int j = i / HD, d = i % HD, t = k0 + j;
      const bool in = t < ix.T;
      ks[j][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + ix.C + d]) : 0.f;
      vs[j][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + 2 * ix.C + d]) : 0.f;
    }
    __syncthreads();
    if (active && k0 <= row) {
      float s[BC], tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BC; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int d = 0; d < HD; ++d) dot += q[d] * ks[j][d];
        s[j] = k0 + j <= row ? dot : -INFINITY;
        tile_max = fmaxf(tile_max, s[j]);
      }
      const float m_new = fmaxf(m, tile_max);  // finite: key k0 <= row is in this tile
      const float correction = expf(m - m_new);
      l *= correction;
#pragma unroll
      for (int d = 0; d < HD; ++d) acc[d] *= correction;
#pragma unroll
      for (int j = 0; j < BC; ++j) {
        const float p = expf(s[j] - m_new);
        l += p;
#pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] += p * vs[j][d];
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (!active) return;
  T* orow = out + (static_cast<size_t>(b) * ix.T + row) * ix.C + static_cast<size_t>(h) * HD;
  const float inv_l = 1.f / l;
#pragma unroll
  for (int d = 0; d < HD; ++d) orow[d] = from_f32<T>(acc[d] * inv_l);
  lse[(static_cast<size_t>(b) * ix.NH + h) * ix.T + row] = m + logf(l);
}

// delta[b,h,t] = sum_d dout * out over the head's channels (the softmax-gradient row term).
template <typename T, int HD>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, QkvIndex ix) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(gridDim.y) * ix.NH * ix.T) return;
  const int t = static_cast<int>(i % ix.T), bh = static_cast<int>(i / ix.T);
  const int b = bh / ix.NH, h = bh % ix.NH;
  const size_t off = (static_cast<size_t>(b) * ix.T + t) * ix.C + static_cast<size_t>(h) * HD;
  float sum = 0.f;
#pragma unroll
  for (int d = 0; d < HD; ++d) sum += to_f32(dout[off + d]) * to_f32(out[off + d]);
  delta[i] = sum;
}

// Shared-memory layout of both backward kernels: the block's own rows (padded so each thread
// reads its row without bank conflicts) and a streamed tile of the other side.
template <int HD>
struct BackwardSmem {
  static constexpr int kStreamed = tile_keys<HD>();
  static constexpr size_t bytes =
      sizeof(float) * (2 * kRows * (HD + 1) + 2 * kStreamed * HD + 2 * kStreamed);
};

// One thread per key j: dv_j = sum_i p_ij dout_i, dk_j = scale * sum_i ds_ij q_i.
template <typename T, int HD>
__global__ void __launch_bounds__(kRows) flash_dkdv_kernel(T* dqkv, const T* dout, const T* qkv,
                                                           const float* lse, const float* delta,
                                                           QkvIndex ix, float scale) {
  constexpr int BQ = BackwardSmem<HD>::kStreamed;
  extern __shared__ float smem[];
  float(*ks)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem);
  float(*vs)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem + kRows * (HD + 1));
  float(*qs)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1));
  float(*dos)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1) + BQ * HD);
  float* lse_s = smem + 2 * kRows * (HD + 1) + 2 * BQ * HD;
  float* delta_s = lse_s + BQ;
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH;
  const int k0 = blockIdx.x * kRows, j = k0 + threadIdx.x;
  const bool active = j < ix.T;
  const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;
  for (int i = threadIdx.x; i < kRows * HD; i += kRows) {
    const int r = i / HD, d = i % HD, t = k0 + r;
    const bool in = t < ix.T;
    ks[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + ix.C + d]) : 0.f;
    vs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + 2 * ix.C + d]) : 0.f;
  }
  float dk[HD], dv[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dk[d] = dv[d] = 0.f;
  for (int i0 = k0; i0 < ix.T; i0 += BQ) {
    __syncthreads();
    for (int i = threadIdx.x; i < BQ * HD; i += kRows) {
      const int r = i / HD, d = i % HD, t = i0 + r;
      const bool in = t < ix.T;
      qs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + d]) : 0.f;
      dos[r][d] = in ? to_f32(dout[(static_cast<size_t>(b) * ix.T + t) * ix.C +
                                   static_cast<size_t>(h) * HD + d])
                     : 0.f;
    }
    for (int r = threadIdx.x; r < BQ; r += kRows) {
      const bool in = i0 + r < ix.T;
      lse_s[r] = in ? lse[stat + i0 + r] : 0.f;
      delta_s[r] = in ? delta[stat + i0 + r] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < BQ; ++r) {
      const int i = i0 + r;
      if (i < j || i >= ix.T) continue;  // causal: query i sees key j only when j <= i
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < HD; ++d) {
        s += qs[r][d] * ks[threadIdx.x][d];
        dp += dos[r][d] * vs[threadIdx.x][d];
      }
      const float p = expf(s * scale - lse_s[r]);
      const float ds = p * (dp - delta_s[r]);
#pragma unroll
      for (int d = 0; d < HD; ++d) {
        dv[d] += p * dos[r][d];
        dk[d] += ds * qs[r][d];
      }
    }
  }
  if (!active) return;
  T* krow = dqkv + ix.q(b, h, j, HD) + ix.C;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    krow[d] = from_f32<T>(dk[d] * scale);
    krow[ix.C + d] = from_f32<T>(dv[d]);
  }
}

// One thread per query i: dq_i = scale * sum_j ds_ij k_j.
template <typename T, int HD>
__global__ void __launch_bounds__(kRows) flash_dq_kernel(T* dqkv, const T* dout, const T* qkv,
                                                         const float* lse, const float* delta,
                                                         QkvIndex ix, float scale) {
  constexpr int BC = BackwardSmem<HD>::kStreamed;
  extern __shared__ float smem[];
  float(*qs)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem);
  float(*dos)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem + kRows * (HD + 1));
  float(*ks)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1));
  float(*vs)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1) + BC * HD);
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH;
  const int q0 = blockIdx.x * kRows, i = q0 + threadIdx.x;
  const bool active = i < ix.T;
  for (int e = threadIdx.x; e < kRows * HD; e += kRows) {
    const int r = e / HD, d = e % HD, t = q0 + r;
    const bool in = t < ix.T;
    qs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + d]) : 0.f;
    dos[r][d] = in ? to_f32(dout[(static_cast<size_t>(b) * ix.T + t) * ix.C +
                                 static_cast<size_t>(h) * HD + d])
                   : 0.f;
  }
  const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;
  const float row_lse = active ? lse[stat + i] : 0.f, row_delta = active ? delta[stat + i] : 0.f;
  float dq[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dq[d] = 0.f;
  const int kv_end = min(ix.T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += BC) {
    __syncthreads();
    for (int e = threadIdx.x; e < BC * HD; e += kRows) {
      const int r = e / HD, d = e % HD, t = k0 + r;
      const bool in = t < ix.T;
      ks[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + ix.C + d]) : 0.f;
      vs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, HD) + 2 * ix.C + d]) : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < BC && k0 + r <= i; ++r) {
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < HD; ++d) {
        s += qs[threadIdx.x][d] * ks[r][d];
        dp += dos[threadIdx.x][d] * vs[r][d];
      }
      const float ds = expf(s * scale - row_lse) * (dp - row_delta);
#pragma unroll
      for (int d = 0; d < HD; ++d) dq[d] += ds * ks[r][d];
    }
  }
  if (!active) return;
  T* qrow = dqkv + ix.q(b, h, i, HD);
#pragma unroll
  for (int d = 0; d < HD; ++d) qrow[d] = from_f32<T>(dq[d] * scale);
}

nfn_status check_args(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH, nfn_dtype dtype,
                      int* head_dim) {
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B=%d T=%d C=%d NH=%d must be positive", op, B, T, C, NH);
  if (C % NH != 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  if (B * NH > 65535)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*NH=%d exceeds 65535", op, B * NH);
  *head_dim = C / NH;
  if (*head_dim != 16 && *head_dim != 32 && *head_dim != 64 && *head_dim != 128)
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: head size C/NH=%d is not one of 16, 32, 64, 128", op,
                *head_dim);
  if (ctx->attention != nfn_attention_path::flash_simt)
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: only the flash_simt attention path is built", op);
  return NFN_OK;
}

template <typename S, int HD>
nfn_status forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
  dim3 grid((T + kRows - 1) / kRows, B * NH);
  flash_forward_kernel<S, HD><<<grid, kRows, 0, ctx->stream>>>(
      static_cast<S*>(out), lse, static_cast<const S*>(qkv), QkvIndex{T, C, NH}, 1.f / sqrtf(HD));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "attention_forward");
  return NFN_OK;
}

template <typename S, int HD>
nfn_status backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                    const float* lse, int B, int T, int C, int NH) {
  const char* op = "attention_backward";
  const QkvIndex ix{T, C, NH};
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, sizeof(float) * static_cast<size_t>(B) * NH * T, &buf, op));
  float* delta = static_cast<float*>(buf);
  dim3 delta_grid((NH * T + 255) / 256, B);
  attention_delta_kernel<S, HD><<<delta_grid, 256, 0, ctx->stream>>>(
      delta, static_cast<const S*>(dout), static_cast<const S*>(out), ix);
  const size_t smem = BackwardSmem<HD>::bytes;
  // Above 48 KiB a kernel must opt in to more dynamic shared memory (once per kernel).
  static const cudaError_t opt_in = [] {
    const size_t smem = BackwardSmem<HD>::bytes;
    cudaError_t e = cudaFuncSetAttribute(flash_dkdv_kernel<S, HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return e != cudaSuccess ? e
                            : cudaFuncSetAttribute(flash_dq_kernel<S, HD>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  }();
  NFN_CUDA_TRY(ctx, opt_in, op);
  dim3 grid((T + kRows - 1) / kRows, B * NH);
  const float scale = 1.f / sqrtf(HD);
  flash_dkdv_kernel<S, HD><<<grid, kRows, smem, ctx->stream>>>(
      static_cast<S*>(dqkv), static_cast<const S*>(dout), static_cast<const S*>(qkv), lse, delta, ix, scale);
  flash_dq_kernel<S, HD><<<grid, kRows, smem, ctx->stream>>>(
      static_cast<S*>(dqkv), static_cast<const S*>(dout), static_cast<const S*>(qkv), lse, delta, ix, scale);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
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

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T,
                                 int C, int NH, nfn_dtype dtype) {
  int hd = 0;
  NFN_TRY(check_args(ctx, "attention_forward", B, T, C, NH, dtype, &hd));
  if (out == nullptr || lse == nullptr || qkv == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "attention_forward: null out, lse or qkv");
  NFN_ATTENTION_DISPATCH(forward, dtype, hd, ctx, out, lse, qkv, B, T, C, NH);
  return NFN_OK;
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* lse, int B, int T, int C, int NH,
                                  nfn_dtype dtype) {
  int hd = 0;
  NFN_TRY(check_args(ctx, "attention_backward", B, T, C, NH, dtype, &hd));
  if (dqkv == nullptr || dout == nullptr || qkv == nullptr || out == nullptr || lse == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "attention_backward: null dqkv, dout, qkv, out or lse");
  NFN_ATTENTION_DISPATCH(backward, dtype, hd, ctx, dqkv, dout, qkv, out, lse, B, T, C, NH);
  return NFN_OK;
}

}  // extern "C"
