// KV-cached causal attention for generation: the new positions' k and v go into the caches,
// then one block per (query, batch row, head) scores every visible cache position into
// shared memory, normalizes them, and sums the values. Memory-bound by the cache reads.
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

template <typename T>
__global__ void write_cache_kernel(T* k_cache, T* v_cache, const T* qkv, int Tq, int pos, int maxT,
                                   int C, size_t total) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % C), t = static_cast<int>(i / C % Tq), b = static_cast<int>(i / C / Tq);
    const size_t src = (static_cast<size_t>(b) * Tq + t) * 3 * C + c;
    const size_t dst = (static_cast<size_t>(b) * maxT + pos + t) * C + c;
    k_cache[dst] = qkv[src + C];
    v_cache[dst] = qkv[src + 2 * C];
  }
}

// grid (Tq, B*NH): query t of the new block sees cache positions [0, pos + t].
template <typename T>
__global__ void __launch_bounds__(kThreads) cached_attention_kernel(
    T* out, const T* k_cache, const T* v_cache, const T* qkv, int Tq, int pos, int maxT, int C,
    int NH, float scale) {
  nfn::cuda::pdl_begin();
  extern __shared__ float smem[];  // q (HD), then scores (pos + Tq)
  __shared__ float reduce[32];
  const int t = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, HD = C / NH;
  const int visible = pos + t + 1;
  float* q = smem;
  float* scores = smem + HD;
  const T* qrow = qkv + (static_cast<size_t>(b) * Tq + t) * 3 * C + static_cast<size_t>(h) * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) q[d] = to_f32(qrow[d]) * scale;
  __syncthreads();
  const size_t cache_row = static_cast<size_t>(b) * maxT;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    const T* k = k_cache + (cache_row + j) * C + static_cast<size_t>(h) * HD;
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
  T* orow = out + (static_cast<size_t>(b) * Tq + t) * C + static_cast<size_t>(h) * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < visible; ++j)
      acc += scores[j] * to_f32(v_cache[(cache_row + j) * C + static_cast<size_t>(h) * HD + d]);
    orow[d] = from_f32<T>(acc * inv);
  }
}

}  // namespace

extern "C" {

nfn_status nfn_attention_kv_cached(nfn_ctx* ctx, void* out, void* k_cache, void* v_cache,
                                   const void* qkv, int B, int Tq, int pos, int maxT, int C, int NH,
                                   nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_kv_cached";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0 || C % NH != 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B=%d Tq=%d C=%d NH=%d (positive, C a multiple of NH)",
                op, B, Tq, C, NH);
  if (pos < 0 || static_cast<long>(pos) + Tq > maxT)  // in long: pos + Tq may pass INT_MAX
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: positions [%d, %ld) do not fit the cache of %d", op,
                pos, static_cast<long>(pos) + Tq, maxT);
  if (static_cast<long>(pos) + Tq + C / NH > kMaxPositions)  // then the sums below fit an int
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: %d cached positions, at most %d on CUDA", op, pos + Tq,
                kMaxPositions - C / NH);
  if (out == nullptr || k_cache == nullptr || v_cache == nullptr || qkv == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, k_cache, v_cache or qkv", op);
  if (static_cast<long>(B) * NH > 65535)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*NH=%ld exceeds 65535", op, static_cast<long>(B) * NH);
  const size_t total = static_cast<size_t>(B) * Tq * C;
  const size_t smem = sizeof(float) * (C / NH + pos + Tq);
  const float scale = 1.f / sqrtf(static_cast<float>(C / NH));
  NFN_DISPATCH(dtype, E, {
    nfn::cuda::launch_kernel(ctx, write_cache_kernel<E>, nfn::cuda::grid_for(total, 256), 256, 0,
                             static_cast<E*>(k_cache), static_cast<E*>(v_cache), static_cast<const E*>(qkv), Tq, pos,
                             maxT, C, total);
    nfn::cuda::launch_kernel(ctx, cached_attention_kernel<E>, dim3(Tq, B * NH), kThreads, smem, static_cast<E*>(out),
                             static_cast<const E*>(k_cache), static_cast<const E*>(v_cache),
                             static_cast<const E*>(qkv), Tq, pos, maxT, C, NH, scale);
  });
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // extern "C"
