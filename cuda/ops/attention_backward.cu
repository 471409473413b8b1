// Causal flash attention backward ("flash_simt"): probabilities are recomputed from the
// saved log-sum-exp, in two kernels (one thread per key of a kv head for dk and dv, summing
// over the kv head's query heads, then one per query for dq) so that no gradient needs
// atomics; each walks only the tiles inside its rows' windows. The delta kernel here also serves the tensor-core
// path (attention_mma_backward.cu), which attention=flash_mma selects where it applies.
#include <type_traits>

#include "cuda/ops/attention_common.cuh"
#include "cuda/ops/launch.h"

using namespace nfn::cuda::attention;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::load_pack;
using nfn::cuda::to_f32;

namespace {

// delta[b,h,t] = sum_d dout * out over the head's channels (the softmax-gradient row term).
// L adjacent lanes share a row, V elements a load, so a warp's loads cover whole rows; their
// sums are combined by shuffles. Rows of hd = head_size<HD, kTail>(head_dim) channels (a whole
// number of V-element loads): the loads past hd are skipped.
template <typename T, int HD, int V, bool kTail>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, QkvIndex ix,
                                       int head_dim, size_t total) {
  nfn::cuda::pdl_begin();
  constexpr int L = HD / V < 32 ? HD / V : 32, kLoads = HD / V / L;  // lanes a row, loads a lane
  const int hd = head_size<HD, kTail>(head_dim);
  const size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x, i = g / L;
  const int part = static_cast<int>(g % L);
  float sum = 0.f;
  if (i < total) {
    const int t = static_cast<int>(i % ix.T), bh = static_cast<int>(i / ix.T);
    const int b = bh / ix.NH, h = bh % ix.NH;
    const size_t off = ix.out(b, h, t, hd);
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      if (kTail && (part + k * L) * V >= hd) continue;  // past the head
      float d[V], o[V];
      load_pack(dout + off, part + k * L, d);
      load_pack(out + off, part + k * L, o);
#pragma unroll
      for (int j = 0; j < V; ++j) sum += d[j] * o[j];
    }
  }
  for (int s = L / 2; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (part == 0 && i < total) delta[i] = sum;
}

template <typename T, int HD, int V, bool kTail>
void launch_delta(nfn_ctx* ctx, float* delta, const T* dout, const T* out, QkvIndex ix, int hd, size_t rows) {
  constexpr int L = HD / V < 32 ? HD / V : 32;
  nfn::cuda::launch_kernel(ctx, attention_delta_kernel<T, HD, V, kTail>, (rows * L + 255) / 256, 256, 0, delta, dout,
                           out, ix, hd, rows);
}

// Shared-memory layout of both backward kernels: the block's own rows (padded so each thread
// reads its row without bank conflicts) and a streamed tile of the other side.
template <int HD>
struct BackwardSmem {
  static constexpr int kStreamed = tile_keys<HD>();
  static constexpr size_t bytes =
      sizeof(float) * (2 * kRows * (HD + 1) + 2 * kStreamed * HD + 2 * kStreamed);
};

// One thread per key j of a kv head: dv_j = sum_i p_ij dout_i, dk_j = scale * sum_i ds_ij q_i
// over the queries i that see it in each of the kv head's query heads. HD wide, for heads of
// hd = head_size<HD, kTail>(head_dim) channels (attention_common.cuh).
template <typename T, int HD, bool kTail>
__global__ void __launch_bounds__(kRows) flash_dkdv_kernel(T* dqkv, const T* dout, const T* qkv,
                                                           const float* lse, const float* delta,
                                                           QkvIndex ix, float scale, int head_dim) {
  nfn::cuda::pdl_begin();
  constexpr int BQ = BackwardSmem<HD>::kStreamed;
  const int hd = head_size<HD, kTail>(head_dim);
  extern __shared__ float smem[];
  float(*ks)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem);
  float(*vs)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem + kRows * (HD + 1));
  float(*qs)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1));
  float(*dos)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1) + BQ * HD);
  float* lse_s = smem + 2 * kRows * (HD + 1) + 2 * BQ * HD;
  float* delta_s = lse_s + BQ;
  const int b = blockIdx.y / ix.NKV, kv = blockIdx.y % ix.NKV;
  const int k0 = blockIdx.x * kRows, j = k0 + threadIdx.x;
  const bool active = j < ix.T;
  const int i_end = ix.query_end(min(ix.T, k0 + kRows));  // past the last query seeing the block's keys
  for (int i = threadIdx.x; i < kRows * HD; i += kRows) {
    const int r = i / HD, d = i % HD, t = k0 + r;
    const bool in = t < ix.T && (!kTail || d < hd);
    ks[r][d] = in ? to_f32(qkv[ix.k(b, kv, t, hd) + d]) : 0.f;
    vs[r][d] = in ? to_f32(qkv[ix.v(b, kv, t, hd) + d]) : 0.f;
  }
  float dk[HD], dv[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dk[d] = dv[d] = 0.f;
  for (int h = kv * ix.group(); h < (kv + 1) * ix.group(); ++h) {
    const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;
    for (int i0 = k0; i0 < i_end; i0 += BQ) {
      __syncthreads();
      for (int i = threadIdx.x; i < BQ * HD; i += kRows) {
        const int r = i / HD, d = i % HD, t = i0 + r;
        const bool in = t < ix.T && (!kTail || d < hd);
        qs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, hd) + d]) : 0.f;
        dos[r][d] = in ? to_f32(dout[ix.out(b, h, t, hd) + d]) : 0.f;
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
        if (i < j || i >= ix.T || !ix.in_window(i, j)) continue;  // query i sees key j in [i - window, i]
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
  }
  if (!active) return;
  T* krow = dqkv + ix.k(b, kv, j, hd);
  T* vrow = dqkv + ix.v(b, kv, j, hd);
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    if (kTail && d >= hd) continue;
    krow[d] = from_f32<T>(dk[d] * scale);
    vrow[d] = from_f32<T>(dv[d]);
  }
}

// One thread per query i: dq_i = scale * sum_j ds_ij k_j over the keys it sees. HD wide, for
// heads of hd = head_size<HD, kTail>(head_dim) channels (attention_common.cuh).
template <typename T, int HD, bool kTail>
__global__ void __launch_bounds__(kRows) flash_dq_kernel(T* dqkv, const T* dout, const T* qkv,
                                                         const float* lse, const float* delta,
                                                         QkvIndex ix, float scale, int head_dim) {
  nfn::cuda::pdl_begin();
  constexpr int BC = BackwardSmem<HD>::kStreamed;
  const int hd = head_size<HD, kTail>(head_dim);
  extern __shared__ float smem[];
  float(*qs)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem);
  float(*dos)[HD + 1] = reinterpret_cast<float(*)[HD + 1]>(smem + kRows * (HD + 1));
  float(*ks)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1));
  float(*vs)[HD] = reinterpret_cast<float(*)[HD]>(smem + 2 * kRows * (HD + 1) + BC * HD);
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH, kv = h / ix.group();
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, i = q0 + threadIdx.x;  // the longest rows start first
  const bool active = i < ix.T;
  const int lo = ix.first_key(i);  // the row sees keys [lo, i]
  for (int e = threadIdx.x; e < kRows * HD; e += kRows) {
    const int r = e / HD, d = e % HD, t = q0 + r;
    const bool in = t < ix.T && (!kTail || d < hd);
    qs[r][d] = in ? to_f32(qkv[ix.q(b, h, t, hd) + d]) : 0.f;
    dos[r][d] = in ? to_f32(dout[ix.out(b, h, t, hd) + d]) : 0.f;
  }
  const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;
  const float row_lse = active ? lse[stat + i] : 0.f, row_delta = active ? delta[stat + i] : 0.f;
  float dq[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dq[d] = 0.f;
  const int kv_end = min(ix.T, q0 + kRows);
  for (int k0 = ix.first_key(q0) / BC * BC; k0 < kv_end; k0 += BC) {
    __syncthreads();
    for (int e = threadIdx.x; e < BC * HD; e += kRows) {
      const int r = e / HD, d = e % HD, t = k0 + r;
      const bool in = t < ix.T && (!kTail || d < hd);
      ks[r][d] = in ? to_f32(qkv[ix.k(b, kv, t, hd) + d]) : 0.f;
      vs[r][d] = in ? to_f32(qkv[ix.v(b, kv, t, hd) + d]) : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = max(0, lo - k0); r < BC && k0 + r <= i; ++r) {
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
  T* qrow = dqkv + ix.q(b, h, i, hd);
#pragma unroll
  for (int d = 0; d < HD; ++d)
    if (!kTail || d < hd) qrow[d] = from_f32<T>(dq[d] * scale);
}

template <typename S, int HD, bool kTail>
nfn_status backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                    const float* lse, int B, const QkvIndex& ix, int hd) {
  const char* op = "attention_backward";
  const int T = ix.T, NH = ix.NH;
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, sizeof(float) * static_cast<size_t>(B) * NH * T, &buf, op));
  float* delta = static_cast<float*>(buf);
  const size_t rows = static_cast<size_t>(B) * NH * T;
  const auto *d = static_cast<const S*>(dout), *o = static_cast<const S*>(out);
  // Every row then starts 16-byte aligned: C and hd are whole packs (always where !kTail).
  constexpr int kPack = nfn::cuda::Pack<S>::n;
  if (nfn::cuda::aligned16({dout, out}) && hd % kPack == 0)
    launch_delta<S, HD, kPack, kTail>(ctx, delta, d, o, ix, hd, rows);
  else
    launch_delta<S, HD, 1, kTail>(ctx, delta, d, o, ix, hd, rows);
  const nfn_dtype dtype = std::is_same_v<S, float> ? NFN_F32 : NFN_BF16;
  if (use_mma(ctx, dtype, hd, ix, {dqkv, dout, qkv})) return mma_backward(ctx, dqkv, dout, qkv, lse, delta, B, ix, hd);
  if (use_tk(ctx, dtype, hd, ix, {dqkv, dout, qkv, lse}))  // TK reads lse in 8-byte pairs
    return nfn::cuda::check(ctx,
                            static_cast<cudaError_t>(
                                nfn_tk_attention_backward(dqkv, dout, qkv, lse, delta, B, T, ix.C, NH, ctx->stream)),
                            op);
  const size_t smem = BackwardSmem<HD>::bytes;
  // Above 48 KiB a kernel must opt in to more dynamic shared memory. The setting belongs to
  // the current device, so it is made on every call (a host call of microseconds): once per
  // process would have covered only the first device a process used.
  NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(flash_dkdv_kernel<S, HD, kTail>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem), op);
  NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(flash_dq_kernel<S, HD, kTail>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem), op);
  const int tiles = (T + kRows - 1) / kRows;
  const float scale = 1.f / sqrtf(static_cast<float>(hd));
  nfn::cuda::launch_kernel(ctx, flash_dkdv_kernel<S, HD, kTail>, dim3(tiles, B * ix.NKV), kRows, smem,
                           static_cast<S*>(dqkv), static_cast<const S*>(dout), static_cast<const S*>(qkv), lse, delta,
                           ix, scale, hd);
  nfn::cuda::launch_kernel(ctx, flash_dq_kernel<S, HD, kTail>, dim3(tiles, B * NH), kRows, smem, static_cast<S*>(dqkv),
                           static_cast<const S*>(dout), static_cast<const S*>(qkv), lse, delta, ix, scale, hd);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                                  const float* lse, int B, int T, int NH, int NKV, int HD, int window,
                                  nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_TRY(check_args(ctx, "attention_backward", B, T, NH, NKV, HD, window, dtype));
  if (dqkv == nullptr || dout == nullptr || qkv == nullptr || out == nullptr || lse == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "attention_backward: null dqkv, dout, qkv, out or lse");
  const QkvIndex ix(T, NH, NKV, HD, window);
  if (use_cudnn(ctx, dtype, HD, ix, {dqkv, dout, qkv, out, lse})) {
    const int C = ix.C;
    nfn_status s = nfn::cuda::cudnn_backward(ctx, dqkv, dout, qkv, out, lse, B, T, C, NH);
    if (s == NFN_ERR_BACKEND && !ctx->deterministic) {
      // deterministic=off asks cuDNN for its atomic-dQ backward; where that graph fails, the
      // deterministic one (the same results, bit for bit repeatable) for good, said in the report.
      ctx->deterministic = true;
      ctx->attention_fallback = "its atomic-dQ backward (deterministic=off) failed, so it runs the deterministic "
                                "one: " + ctx->last_error;
      s = nfn::cuda::cudnn_backward(ctx, dqkv, dout, qkv, out, lse, B, T, C, NH);
    }
    // As the forward does: cudnn by default (not configured) whose backward graph fails where
    // the forward's built (another engine: deterministic=off asks for the atomic-dQ one) hands
    // over to flash_mma for good, which reads the same lse and overwrites all of dqkv.
    if (s != NFN_ERR_BACKEND || ctx->attention_configured) return s;
    ctx->attention = nfn_attention_path::flash_mma;
    ctx->attention_fallback = "flash_mma (cuDNN's backward, the default, failed: " + ctx->last_error + ")";
    return nfn_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, window, dtype);
  }
  NFN_ATTENTION_DISPATCH(backward, dtype, HD, ctx, dqkv, dout, qkv, out, lse, B, ix, HD);
  return NFN_OK;
}

}  // extern "C"
