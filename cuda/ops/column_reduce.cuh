// Deterministic column sums for parameter gradients (bias, norm weights): blocks sum row
// slices into f32 partials, then one pass adds the partials, in a fixed order, to dst.
// (cuBLASLt's BGRADB epilogue, which this replaced for bias gradients, runs as a separate
// kernel of its own: 26 us a call on an H200 at GPT-2's shapes, about 2 TB/s.)
#pragma once

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

namespace nfn::cuda {

constexpr int kColumnTile = 32, kRowThreads = 8, kMaxRowSlices = 128;

// dst[c] += the sum over rows of x[r][c] (x is N x C). Block (tile, slice) sums the slice's
// rows of the tile's columns into partials[slice][c]; a thread owns a pack of V adjacent
// columns (16 bytes of bf16 or f32 where C and x allow, else one column), so a warp reads 32
// packs of a row at once, and the block's 8 thread rows are added in order. The last block of
// a tile to finish (done[tile] counts them; it leaves it 0 again) adds the tile's partials,
// slice y, y + 8, ... by thread row y and then the 8 rows in order, to dst: the same order,
// so the same bits, whichever block is last. done NULL: partials only (add_partials finishes).
template <int V, typename T>
__global__ void column_sums_kernel(const T* x, int N, int C, float* partials, unsigned* done, T* dst) {
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
  __shared__ bool last;
#pragma unroll
  for (int j = 0; j < V; ++j) sums[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && p < packs) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float s = 0.f;
      for (int y = 0; y < kRowThreads; ++y) s += sums[y][j][threadIdx.x];
      partials[static_cast<size_t>(blockIdx.y) * C + p * V + j] = s;
    }
    __threadfence();  // the partials are visible to every block before this block is counted
  }
  if (done == nullptr) return;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(done + blockIdx.x, 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  // Every block of the tile has written its partials (volatile: past this SM's L1).
  const volatile float* all = partials;
  float total[V] = {};
  if (p < packs)
    for (int slice = threadIdx.y; slice < slices; slice += kRowThreads)
#pragma unroll
      for (int j = 0; j < V; ++j) total[j] += all[static_cast<size_t>(slice) * C + p * V + j];
#pragma unroll
  for (int j = 0; j < V; ++j) sums[threadIdx.y][j][threadIdx.x] = total[j];
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) done[blockIdx.x] = 0;
  if (threadIdx.y != 0 || p >= packs) return;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float s = 0.f;
    for (int y = 0; y < kRowThreads; ++y) s += sums[y][j][threadIdx.x];
    T* d = dst + p * V + j;
    *d = from_f32<T>(to_f32(*d) + s);
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

// dst[c] += the sum over rows of x[r][c] (x is N x C), in a fixed order, so the same bits
// every run: one launch of column_sums_kernel (add_partials after it where C has more than
// kColumnCounters tiles).
template <typename T>
nfn_status add_column_sums(nfn_ctx* ctx, const char* op, T* dst, const T* x, int N, int C) {
  if (N <= 0 || C <= 0) return NFN_OK;
  const int slices = row_slices(N);
  void* buf = nullptr;
  NFN_TRY(scratch(ctx, sizeof(float) * slices * static_cast<size_t>(C), &buf, op));
  float* partials = static_cast<float*>(buf);
  const bool packed = rows_packed<T>(C, {x});
  const int V = packed ? Pack<T>::n : 1, tiles = (C / V + kColumnTile - 1) / kColumnTile;
  unsigned* done = tiles <= kColumnCounters ? ctx->blocks_done + 1 : nullptr;
  const dim3 grid(tiles, slices), block(kColumnTile, kRowThreads);
  if (packed)
    column_sums_kernel<Pack<T>::n><<<grid, block, 0, ctx->stream>>>(x, N, C, partials, done, dst);
  else
    column_sums_kernel<1><<<grid, block, 0, ctx->stream>>>(x, N, C, partials, done, dst);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return done != nullptr ? NFN_OK : add_partials(ctx, op, ColumnDsts<T, 1>{{dst}}, partials, slices, C);
}

}  // namespace nfn::cuda
