// Deterministic column sums for parameter gradients (bias, norm weights): blocks sum row
// slices into f32 partials, then one pass adds the partials, in a fixed order, to dst.
#pragma once

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

namespace nfn::cuda {

constexpr int kColumnTile = 32, kRowThreads = 8, kMaxRowSlices = 128;

// partials[v][slice][c] = sum over the slice's rows of f(r, c)[v], NV values per element.
template <int NV, typename F>
__global__ void column_partials_kernel(F f, int N, int C, float* partials) {
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int slices = gridDim.y;
  float acc[NV] = {};
  if (c < C) {
    for (int r = blockIdx.y * kRowThreads + threadIdx.y; r < N; r += slices * kRowThreads) {
      float v[NV];
      f(r, c, v);
#pragma unroll
      for (int k = 0; k < NV; ++k) acc[k] += v[k];
    }
  }
  __shared__ float sums[NV][kRowThreads][kColumnTile];
#pragma unroll
  for (int k = 0; k < NV; ++k) sums[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      float s = 0.f;
      for (int y = 0; y < kRowThreads; ++y) s += sums[k][y][threadIdx.x];
      partials[(static_cast<size_t>(k) * slices + blockIdx.y) * C + c] = s;
    }
  }
}

// dst[c] += sum over slices of partials[slice][c] (dst may be NULL: nothing to do).
template <typename T>
__global__ void add_partials_kernel(T* dst, const float* partials, int slices, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (dst == nullptr || c >= C) return;
  float s = 0.f;
  for (int i = 0; i < slices; ++i) s += partials[static_cast<size_t>(i) * C + c];
  dst[c] = from_f32<T>(to_f32(dst[c]) + s);
}

inline int row_slices(int N) {
  int s = (N + 8 * kRowThreads - 1) / (8 * kRowThreads);
  return s < 1 ? 1 : (s > kMaxRowSlices ? kMaxRowSlices : s);
}

// Adds the column sums of f's NV values to dsts[0..NV) (entries may be NULL).
template <typename T, int NV, typename F>
nfn_status add_column_sums(nfn_ctx* ctx, const char* op, T* const (&dsts)[NV], F f, int N, int C) {
  if (N <= 0 || C <= 0) return NFN_OK;
  const int slices = row_slices(N);
  void* buf = nullptr;
  NFN_TRY(scratch(ctx, sizeof(float) * NV * slices * static_cast<size_t>(C), &buf, op));
  float* partials = static_cast<float*>(buf);
  dim3 grid((C + kColumnTile - 1) / kColumnTile, slices), block(kColumnTile, kRowThreads);
  column_partials_kernel<NV><<<grid, block, 0, ctx->stream>>>(f, N, C, partials);
  for (int k = 0; k < NV; ++k)
    if (dsts[k] != nullptr)
      add_partials_kernel<<<(C + 255) / 256, 256, 0, ctx->stream>>>(
          dsts[k], partials + static_cast<size_t>(k) * slices * C, slices, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace nfn::cuda
