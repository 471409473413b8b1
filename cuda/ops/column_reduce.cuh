// Deterministic column sums for parameter gradients (bias, norm weights): blocks sum row
// slices into f32 partials, then one pass adds the partials, in a fixed order, to dst.
// (cuBLASLt's BGRADB epilogue, which this replaced for bias gradients, runs as a separate
// kernel of its own: 26 us a call on an H200 at GPT-2's shapes, about 2 TB/s.)
#pragma once

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

namespace nfn::cuda {

constexpr int kColumnTile = 32, kRowThreads = 8, kMaxRowSlices = 128;

// partials[slice][c] = sum over the slice's rows of x[r][c] (x is N x C). A thread owns a pack
// of V adjacent columns (16 bytes of bf16 or f32 where C and x allow, else one column), so a
// warp reads 32 packs of a row at once; the block's 8 thread rows are added in order.
template <int V, typename T>
__global__ void column_partials_kernel(const T* x, int N, int C, float* partials) {
  nfn::cuda::pdl_begin();
  const int packs = C / V, p = blockIdx.x * kColumnTile + threadIdx.x, slices = gridDim.y;
  float acc[V] = {};
  if (p < packs) {
#pragma unroll 4
    for (int r = blockIdx.y * kRowThreads + threadIdx.y; r < N; r += slices * kRowThreads) {
      float v[V];
      load_pack(x + static_cast<size_t>(r) * C, p, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
  }
  __shared__ float sums[kRowThreads][V][kColumnTile];  // [.][j][lane]: lanes hit distinct banks
#pragma unroll
  for (int j = 0; j < V; ++j) sums[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.y != 0 || p >= packs) return;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float s = 0.f;
    for (int y = 0; y < kRowThreads; ++y) s += sums[y][j][threadIdx.x];
    partials[static_cast<size_t>(blockIdx.y) * C + p * V + j] = s;
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
  nfn::cuda::pdl_begin();
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
  nfn::cuda::launch_kernel(ctx, add_partials_kernel<T, NV>, dim3((C + 31) / 32, NV), dim3(32, 32), 0, dsts, partials,
                           slices, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

inline int row_slices(int N) {
  int s = (N + 8 * kRowThreads - 1) / (8 * kRowThreads);
  return s < 1 ? 1 : (s > kMaxRowSlices ? kMaxRowSlices : s);
}

// dst[c] += the sum over rows of x[r][c] (x is N x C): f32 partials over row slices, then
// add_partials, so the order is fixed and the result the same every run. (One launch, with the
// last block of each column tile adding that tile's partials, is slower on an H200 at GPT-2
// 124M: 134 us for a layer's four bias gradients against 111, the last blocks' serial tail
// costing more than add_partials' launch.)
template <typename T>
nfn_status add_column_sums(nfn_ctx* ctx, const char* op, T* dst, const T* x, int N, int C) {
  if (N <= 0 || C <= 0) return NFN_OK;
  const int slices = row_slices(N);
  void* buf = nullptr;
  NFN_TRY(scratch(ctx, sizeof(float) * slices * static_cast<size_t>(C), &buf, op));
  float* partials = static_cast<float*>(buf);
  const bool packed = rows_packed<T>(C, {x});
  const int V = packed ? Pack<T>::n : 1, tiles = (C / V + kColumnTile - 1) / kColumnTile;
  const dim3 grid(tiles, slices), block(kColumnTile, kRowThreads);
  if (packed)
    nfn::cuda::launch_kernel(ctx, column_partials_kernel<Pack<T>::n, T>, grid, block, 0, x, N, C, partials);
  else
    nfn::cuda::launch_kernel(ctx, column_partials_kernel<1, T>, grid, block, 0, x, N, C, partials);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return add_partials(ctx, op, ColumnDsts<T, 1>{{dst}}, partials, slices, C);
}

}  // namespace nfn::cuda
