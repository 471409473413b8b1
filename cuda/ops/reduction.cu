// Sum of squares over many buffers in one launch: blocks walk a flattened index space and
// reduce in fp32 into one partial each; a second, one-block launch adds the partials in a
// fixed order into the device-side result (the clip norm stays on the GPU). No atomics, so
// the sum, and the clip scale made from it, is the same bits on every run.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::fail;

namespace {

constexpr int kMaxBufs = 512;

struct BufList {
  const void* ptr[kMaxBufs];
  size_t end[kMaxBufs];  // exclusive prefix ends of the element counts
  int count;
};

constexpr unsigned kBlock = 512, kMaxGrid = 1024;

template <typename T>
__global__ void sum_squares_kernel(BufList list, size_t total, float* partials) {
  float acc = 0.f;
  int b = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    while (i >= list.end[b]) ++b;
    size_t start = b == 0 ? 0 : list.end[b - 1];
    float v = nfn::cuda::to_f32(static_cast<const T*>(list.ptr[b])[i - start]);
    acc += v * v;
  }
  __shared__ float shared[32];
  acc = nfn::cuda::block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// *out = the sum of n partials, in the same order every time.
__global__ void sum_partials_kernel(const float* partials, unsigned n, float* out) {
  __shared__ float shared[32];
  float acc = 0.f;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = nfn::cuda::block_sum(acc, shared);
  if (threadIdx.x == 0) *out = acc;
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
  NFN_CHECK_DTYPE(ctx, dtype, "sum_squares_many");
  if (total == 0) {
    NFN_CUDA_TRY(ctx, cudaMemsetAsync(out, 0, sizeof(float), ctx->stream), "sum_squares_many");
    return NFN_OK;
  }
  const unsigned grid = std::min(nfn::cuda::grid_for(total, kBlock), kMaxGrid);
  void* partials = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, grid * sizeof(float), &partials, "sum_squares_many"));
  NFN_DISPATCH(dtype, T, sum_squares_kernel<T><<<grid, kBlock, 0, ctx->stream>>>(
                             list, total, static_cast<float*>(partials)));
  sum_partials_kernel<<<1, kMaxGrid, 0, ctx->stream>>>(static_cast<const float*>(partials), grid, out);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "sum_squares_many");
  return NFN_OK;
}

}  // extern "C"
