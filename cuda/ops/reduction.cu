// Sum of squares over many buffers in one launch: blocks walk a flattened index space (16
// bytes a load where every buffer allows) and reduce in fp32 into one partial each; the last
// block to finish adds the partials in index order into the device-side result (the clip norm
// stays on the GPU). No float atomics, so the sum, and the clip scale made from it, is the
// same bits on every run.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;

namespace {

constexpr int kMaxBufs = 512;

struct BufList {
  const void* ptr[kMaxBufs];
  size_t end[kMaxBufs];  // exclusive prefix ends of the element counts
  int count;
};

constexpr unsigned kBlock = 512, kMaxGrid = 1024;

// V consecutive elements of one buffer a thread, moved V at a time (every buffer's count a
// multiple of V and its start 16-byte aligned when V > 1). `done` counts the blocks that have
// written their partial; it is 0 at launch and the last block leaves it 0 again (the context
// keeps it: nfn_ctx::blocks_done).
template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    sum_squares_kernel(BufList list, size_t total, float* partials, unsigned* done, float* out) {
  nfn::cuda::pdl_begin();
  float acc = 0.f;
  int b = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total / V;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    while (i * V >= list.end[b]) ++b;
    const size_t k = (i * V - (b == 0 ? 0 : list.end[b - 1])) / V;  // the buffer's k-th pack
    float x[V];
    nfn::cuda::load_pack(static_cast<const T*>(list.ptr[b]), k, x);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += x[j] * x[j];
  }
  __shared__ float shared[32];
  __shared__ bool last;
  acc = nfn::cuda::block_sum(acc, shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = acc;
    __threadfence();  // the partial is visible to every block before this block is counted
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  // Every other block has written its partial: add them all in index order (volatile: past
  // this SM's L1, which may hold none of them).
  const volatile float* all = partials;
  acc = 0.f;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) acc += all[i];
  acc = nfn::cuda::block_sum(acc, shared);
  if (threadIdx.x == 0) {
    *out = acc;
    *done = 0;
  }
}

// Whether every buffer of `list` can move as 16-byte packs of T.
template <typename T>
bool all_packed(const BufList& list) {
  for (int b = 0; b < list.count; ++b) {
    const size_t n = list.end[b] - (b == 0 ? 0 : list.end[b - 1]);
    if (n % nfn::cuda::Pack<T>::n != 0 || !nfn::cuda::aligned16({list.ptr[b]})) return false;
  }
  return true;
}

}  // namespace

extern "C" {

nfn_status nfn_sum_squares_many(nfn_ctx* ctx, const void* const* host_bufs,
                                const size_t* host_counts, int nbufs, nfn_dtype dtype,
                                float* out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr || (nbufs > 0 && (host_bufs == nullptr || host_counts == nullptr)))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: null pointer");
  if (nbufs > kMaxBufs)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: %d buffers, at most %d", nbufs,
                kMaxBufs);
  BufList list{};
  size_t total = 0;
  for (int b = 0; b < nbufs; ++b) {
    if (host_bufs[b] == nullptr && host_counts[b] > 0)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: buffer %d is null (count %zu)", b, host_counts[b]);
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
  NFN_DISPATCH(dtype, T, {
    constexpr int n = nfn::cuda::Pack<T>::n;
    const bool packed = all_packed<T>(list);
    const unsigned grid = std::min(nfn::cuda::grid_for(packed ? total / n : total, kBlock), kMaxGrid);
    void* partials = nullptr;
    NFN_TRY(nfn::cuda::scratch(ctx, grid * sizeof(float), &partials, "sum_squares_many"));
    auto* part = static_cast<float*>(partials);
    if (packed)
      nfn::cuda::launch_kernel(ctx, sum_squares_kernel<T, n>, grid, kBlock, 0, list, total, part,
                               ctx->blocks_done, out);
    else
      nfn::cuda::launch_kernel(ctx, sum_squares_kernel<T, 1>, grid, kBlock, 0, list, total, part,
                               ctx->blocks_done, out);
  });
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "sum_squares_many");
  return NFN_OK;
}

}  // extern "C"
