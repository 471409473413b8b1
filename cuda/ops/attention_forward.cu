// Causal flash attention of nfn's own ("flash_simt"), forward: tiles of K and V (the query
// head's kv head) stream through shared memory, each thread owns one query row with f32 math,
// and the (T,T) scores never reach device memory; a block walks only the key tiles its rows'
// windows reach. CUDA cores only; under attention=flash_mma the calls it covers go to the
// tensor-core kernels (attention_mma_forward.cu).
#include "cuda/ops/attention_common.cuh"
#include "cuda/ops/launch.h"

using namespace nfn::cuda::attention;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

// HD wide, for heads of hd = head_size<HD, kTail>(head_dim) channels (attention_common.cuh).
template <typename T, int HD, bool kTail>
__global__ void __launch_bounds__(kRows) flash_forward_kernel(T* out, float* lse, const T* qkv,
                                                              QkvIndex ix, float scale, int head_dim) {
  nfn::cuda::pdl_begin();
  constexpr int BC = tile_keys<HD>();
  const int hd = head_size<HD, kTail>(head_dim);
  __shared__ float ks[BC][HD], vs[BC][HD];
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH, kv = h / ix.group();
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, row = q0 + threadIdx.x;  // the longest rows start first
  const bool active = row < ix.T;
  const int lo = ix.first_key(row);  // the row sees keys [lo, row]
  float q[HD], acc[HD];
  if (active) {
    const T* qrow = qkv + ix.q(b, h, row, hd);
#pragma unroll
    for (int d = 0; d < HD; ++d) q[d] = (!kTail || d < hd) ? to_f32(qrow[d]) * scale : 0.f, acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int kv_end = min(ix.T, q0 + kRows);
  for (int k0 = ix.first_key(q0) / BC * BC; k0 < kv_end; k0 += BC) {
    for (int i = threadIdx.x; i < BC * HD; i += kRows) {
      const int j = i / HD, d = i % HD, t = k0 + j;
      const bool in = t < ix.T && (!kTail || d < hd);
      ks[j][d] = in ? to_f32(qkv[ix.k(b, kv, t, hd) + d]) : 0.f;
      vs[j][d] = in ? to_f32(qkv[ix.v(b, kv, t, hd) + d]) : 0.f;
    }
    __syncthreads();
    if (active && k0 <= row && k0 + BC > lo) {
      float s[BC], tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BC; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int d = 0; d < HD; ++d) dot += q[d] * ks[j][d];
        s[j] = k0 + j <= row && k0 + j >= lo ? dot : -INFINITY;
        tile_max = fmaxf(tile_max, s[j]);
      }
      const float m_new = fmaxf(m, tile_max);  // finite: the tile holds a key of [lo, row]
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
  T* orow = out + ix.out(b, h, row, hd);
  const float inv_l = 1.f / l;
#pragma unroll
  for (int d = 0; d < HD; ++d)
    if (!kTail || d < hd) orow[d] = from_f32<T>(acc[d] * inv_l);
  lse[(static_cast<size_t>(b) * ix.NH + h) * ix.T + row] = m + logf(l);
}

template <typename S, int HD, bool kTail>
nfn_status forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, const QkvIndex& ix, int hd) {
  dim3 grid((ix.T + kRows - 1) / kRows, B * ix.NH);
  const float scale = 1.f / sqrtf(static_cast<float>(hd));  // the real head size's
  nfn::cuda::launch_kernel(ctx, flash_forward_kernel<S, HD, kTail>, grid, kRows, 0, static_cast<S*>(out), lse,
                           static_cast<const S*>(qkv), ix, scale, hd);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "attention_forward");
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T, int NH,
                                 int NKV, int HD, int window, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_TRY(check_args(ctx, "attention_forward", B, T, NH, NKV, HD, window, dtype));
  if (out == nullptr || lse == nullptr || qkv == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "attention_forward: null out, lse or qkv");
  const QkvIndex ix(T, NH, NKV, HD, window);
  if (use_mma(ctx, dtype, HD, ix, {out, qkv})) return mma_forward(ctx, out, lse, qkv, B, ix, HD);
  if (use_cudnn(ctx, dtype, HD, ix, {out, qkv, lse})) {
    const nfn_status s = nfn::cuda::cudnn_forward(ctx, out, lse, qkv, B, T, ix.C, NH);
    // cudnn by default (not configured) failing here, as where cuDNN loads but cannot build its
    // graph (no NVRTC, say: nothing was enqueued): flash_mma takes over for good, and says why.
    if (s != NFN_ERR_BACKEND || ctx->attention_configured) return s;
    ctx->attention = nfn_attention_path::flash_mma;
    ctx->attention_fallback = "flash_mma (cuDNN, the default, failed: " + ctx->last_error + ")";
    return nfn_attention_forward(ctx, out, lse, qkv, B, T, NH, NKV, HD, window, dtype);
  }
  if (use_tk(ctx, dtype, HD, ix, {out, qkv, lse}))  // TK reads lse in 8-byte pairs
    return nfn::cuda::check(
        ctx, static_cast<cudaError_t>(nfn_tk_attention_forward(out, lse, qkv, B, T, ix.C, NH, ctx->stream)),
        "attention_forward (thunderkittens)");
  NFN_ATTENTION_DISPATCH(forward, dtype, HD, ctx, out, lse, qkv, B, ix, HD);
  return NFN_OK;
}

}  // extern "C"
