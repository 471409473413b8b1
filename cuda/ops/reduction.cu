// Sum of squares over many buffers in one launch: blocks walk a flattened index space,
// reduce in fp32 per block, and add to the device-side result (the clip norm stays on GPU).
#include <cuda_bf16.h>

#include "cuda/ops/context.h"

using nfn::cuda::fail;

namespace {

constexpr int kMaxBufs = 512;

struct BufList {
  const void* ptr[kMaxBufs];
  size_t end[kMaxBufs];  // exclusive prefix ends of the element counts
  int count;
};

template <typename T>
__device__ float load_f32(const T* p, size_t i);
template <>
__device__ float load_f32<float>(const float* p, size_t i) { return p[i]; }
template <>
__device__ float load_f32<__nv_bfloat16>(const __nv_bfloat16* p, size_t i) {
  return __bfloat162float(p[i]);
}

template <typename T>
__global__ void sum_squares_kernel(BufList list, size_t total, float* out) {
  float acc = 0.f;
  int b = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    while (i >= list.end[b]) ++b;
    size_t start = b == 0 ? 0 : list.end[b - 1];
    float v = load_f32(static_cast<const T*>(list.ptr[b]), i - start);
    acc += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (threadIdx.x == 0) atomicAdd(out, acc);
  }
}

}  // namespace

extern "C" {

nfn_status nfn_sum_squares_many(nfn_ctx* ctx, const void* const* host_bufs,
                                const size_t* host_counts, int nbufs, nfn_dtype dtype,
                                float* out) {
  if (out == nullptr || (nbufs > 0 && (host_bufs == nullptr || host_counts == nullptr)))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: null pointer");
  if (nbufs > kMaxBufs)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: %d buffers, at most %d", nbufs,
                kMaxBufs);
  BufList list{};
  size_t total = 0;
  for (int b = 0; b < nbufs; ++b) {
    list.ptr[b] = host_bufs[b];
    total += host_counts[b];
    list.end[b] = total;
  }
  list.count = nbufs;
  NFN_CUDA_TRY(ctx, cudaMemsetAsync(out, 0, sizeof(float), ctx->stream), "sum_squares_many");
  if (total == 0) return NFN_OK;
  const unsigned block = 512, grid = nfn::cuda::grid_for(total, block) < 1024 ? nfn::cuda::grid_for(total, block) : 1024;
  if (dtype == NFN_F32) {
    sum_squares_kernel<float><<<grid, block, 0, ctx->stream>>>(list, total, out);
  } else if (dtype == NFN_BF16) {
    sum_squares_kernel<__nv_bfloat16><<<grid, block, 0, ctx->stream>>>(list, total, out);
  } else {
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: unknown dtype %d",
                static_cast<int>(dtype));
  }
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "sum_squares_many");
  return NFN_OK;
}

}  // extern "C"
