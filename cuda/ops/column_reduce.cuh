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

// The destinations of NV column sums (entries may be NULL: nothing to add).
template <typename T, int NV>
struct ColumnDsts {
  T* p[NV];
};

// dsts.p[k][c] += the sum over slices of partials[k][slice][c], for k = blockIdx.y. 32 columns
// a block: each of its 32 thread rows sums every 32nd slice, then thread row 0 adds the 32
// sums in order, so the order is fixed and the partials are read by many SMs at once.
template <typename T, int NV>
__global__ void __launch_bounds__(1024)
    add_partials_kernel(ColumnDsts<T, NV> dsts, const float* partials, int slices, int C) {
  T* dst = dsts.p[blockIdx.y];
  if (dst == nullptr) return;
  partials += static_cast<size_t>(blockIdx.y) * slices * C;
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (c < C)
    for (int i = threadIdx.y; i < slices; i += 32) s += partials[static_cast<size_t>(i) * C + c];
  __shared__ float sums[32][33];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int y = 1; y < 32; ++y) s += sums[y][threadIdx.x];
  dst[c] = from_f32<T>(to_f32(dst[c]) + s);
}

// Adds partials [NV][slices][C] (f32) to dsts[0..NV) (entries may be NULL), one launch.
template <typename T, int NV>
nfn_status add_partials(nfn_ctx* ctx, const char* op, ColumnDsts<T, NV> dsts, const float* partials, int slices,
                        int C) {
  add_partials_kernel<<<dim3((C + 31) / 32, NV), dim3(32, 32), 0, ctx->stream>>>(dsts, partials, slices, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
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
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  ColumnDsts<T, NV> d;
  for (int k = 0; k < NV; ++k) d.p[k] = dsts[k];
  return add_partials(ctx, op, d, partials, slices, C);
}

}  // namespace nfn::cuda
