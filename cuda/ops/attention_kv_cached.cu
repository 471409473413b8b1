// KV-cached causal attention for generation, with attention_forward's grouped-query heads and
// sliding window: the new positions' k and v heads go into the caches, then one block per
// (query, batch row, query head) scores every cache position it sees (its kv head's, inside
// its window) into shared memory, normalizes them, and sums the values. Memory-bound by the
// cache reads.
#include <string>

#include "cc/ops/attention_geometry.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::block_max;
using nfn::cuda::block_sum;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

constexpr int kThreads = 128;
constexpr int kMaxPositions = 11264;  // scores in static-limit shared memory (44 KiB)

// The cached heads: rows of KV = NKV * HD in the caches, q heads in the first C = NH * HD
// columns of a qkv row of ld = C + 2 * KV, k after them, v after those.
struct CacheIndex {
  int Tq, pos, maxT, NH, NKV, HD, window;
  __device__ int C() const { return NH * HD; }
  __device__ int KV() const { return NKV * HD; }
  __device__ size_t qkv_row(int b, int t) const { return (static_cast<size_t>(b) * Tq + t) * (C() + 2 * KV()); }
  __device__ size_t cache_row(int b, int p) const { return (static_cast<size_t>(b) * maxT + p) * KV(); }
};

template <typename T>
__global__ void write_cache_kernel(T* k_cache, T* v_cache, const T* qkv, CacheIndex ix, size_t total) {
  nfn::cuda::pdl_begin();
  const int KV = ix.KV();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % KV), t = static_cast<int>(i / KV % ix.Tq), b = static_cast<int>(i / KV / ix.Tq);
    const size_t src = ix.qkv_row(b, t) + ix.C() + c, dst = ix.cache_row(b, ix.pos + t) + c;
    k_cache[dst] = qkv[src];
    v_cache[dst] = qkv[src + KV];
  }
}

// grid (Tq, B*NH): query t of the new block sees cache positions [first, pos + t] of its kv
// head, first = max(0, pos + t - window) (0 without one).
template <typename T>
__global__ void __launch_bounds__(kThreads) cached_attention_kernel(
    T* out, const T* k_cache, const T* v_cache, const T* qkv, CacheIndex ix, float scale) {
  nfn::cuda::pdl_begin();
  extern __shared__ float smem[];  // q (HD), then the visible positions' scores
  __shared__ float reduce[32];
  const int t = blockIdx.x, b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH, HD = ix.HD;
  const int first = nfn::attention::first_key(ix.pos + t, ix.window), visible = ix.pos + t + 1 - first;
  const size_t kv_col = static_cast<size_t>(h / (ix.NH / ix.NKV)) * HD;
  float* q = smem;
  float* scores = smem + HD;
  const T* qrow = qkv + ix.qkv_row(b, t) + static_cast<size_t>(h) * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) q[d] = to_f32(qrow[d]) * scale;
  __syncthreads();
  const T* keys = k_cache + ix.cache_row(b, first) + kv_col;
  const T* values = v_cache + ix.cache_row(b, first) + kv_col;
  const size_t KV = ix.KV();
  float m = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    const T* k = keys + j * KV;
    float s = 0.f;
    for (int d = 0; d < HD; ++d) s += q[d] * to_f32(k[d]);
    scores[j] = s;
    m = fmaxf(m, s);
  }
  m = block_max(m, reduce);
  float sum = 0.f;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    const float p = expf(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  const float inv = 1.f / block_sum(sum, reduce);  // its barriers also publish scores[]
  T* orow = out + (static_cast<size_t>(b) * ix.Tq + t) * ix.C() + static_cast<size_t>(h) * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < visible; ++j) acc += scores[j] * to_f32(values[j * KV + d]);
    orow[d] = from_f32<T>(acc * inv);
  }
}

}  // namespace

extern "C" {

nfn_status nfn_attention_kv_cached(nfn_ctx* ctx, void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                                   int Tq, int pos, int maxT, int NH, int NKV, int HD, int window,
                                   nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_kv_cached";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::attention::check_cached_args(B, Tq, pos, maxT, NH, NKV, HD, window);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  // The most positions a query sees: every one up to the block's last, or its window.
  const long visible = window > 0 && window < pos + Tq ? window + 1L : static_cast<long>(pos) + Tq;
  if (visible + HD > kMaxPositions)  // then the sums below fit an int
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: %ld visible cached positions, at most %ld on CUDA", op, visible,
                kMaxPositions - static_cast<long>(HD));
  if (out == nullptr || k_cache == nullptr || v_cache == nullptr || qkv == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, k_cache, v_cache or qkv", op);
  if (static_cast<long>(B) * NH > 65535)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*NH=%ld exceeds 65535", op, static_cast<long>(B) * NH);
  const CacheIndex ix{Tq, pos, maxT, NH, NKV, HD, window};
  const size_t total = static_cast<size_t>(B) * Tq * NKV * HD;
  const size_t smem = sizeof(float) * (HD + visible);
  const float scale = 1.f / sqrtf(static_cast<float>(HD));
  NFN_DISPATCH(dtype, E, {
    nfn::cuda::launch_kernel(ctx, write_cache_kernel<E>, nfn::cuda::grid_for(total, 256), 256, 0,
                             static_cast<E*>(k_cache), static_cast<E*>(v_cache), static_cast<const E*>(qkv), ix, total);
    nfn::cuda::launch_kernel(ctx, cached_attention_kernel<E>, dim3(Tq, B * NH), kThreads, smem, static_cast<E*>(out),
                             static_cast<const E*>(k_cache), static_cast<const E*>(v_cache),
                             static_cast<const E*>(qkv), ix, scale);
  });
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // extern "C"
