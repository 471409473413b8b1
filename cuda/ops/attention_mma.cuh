// Shared by attention_mma_forward.cu and attention_mma_backward.cu ("flash_mma"): block shape,
// the m16n8k16 tensor-core instruction, fragment loads through ldmatrix, and the global ->
// shared tile copy through cp.async. Fragment layouts and ldmatrix addressing are in mma_layout.h
// (host-testable).
#pragma once

#include <cstdint>

#include "cuda/ops/attention_common.cuh"
#include "cuda/ops/cp_async.cuh"
#include "cuda/ops/mma_layout.h"

namespace nfn::cuda::attention::mma_path {

using namespace nfn::cuda::mma;
using nfn::cuda::cp_async_16;  // cp_async.cuh, as mma_path's own
using nfn::cuda::cp_async_commit;
using nfn::cuda::cp_async_wait;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // rows per block (queries or keys), 16 per warp
constexpr int kPad = 8;             // bf16 per shared row past HD: 16-byte rows, no bank conflicts
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared-memory row stride in bf16 elements. With HD in 16s, HD + 8 is 4 words (banks) times
// an odd number, so 8 consecutive rows start in 8 distinct groups of 4 banks: both the
// pair-in-row loads (8 rows x 4 pairs) and the pair-in-column loads (4 row pairs x 8 columns)
// of a warp fall in distinct banks (tests/cuda:mma_layout_test).
template <int HD>
constexpr int stride() { return HD + kPad; }

// D += A B for one m16n8k16 tile: bf16 A (row-major fragment), bf16 B (column fragment),
// f32 accumulators in place.
// cuda/emu runs it as a warp-wide rendezvous that multiplies the gathered fragments.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::mma_m16n8k16_bf16(d, a, b);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8x8 matrices of 16-bit values from
// shared memory, one register each; `row` is this lane's row address (mma_layout.h says which
// row each lane gives and what lands where). cuda/emu runs it as a warp-wide rendezvous.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#ifdef NFN_CUDA_EMULATION
  ::nfn_emu::ldmatrix(r, 4, kTrans, row);
#else
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#endif
}

// The A fragment of the 16x16 block at (row0, col0) of a row-major shared matrix.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* m, int stride, int row0, int col0,
                                       int lane) {
  ldmatrix_x4<false>(a, m + a_ldsm_offset(lane, stride, row0, col0));
}

// The B fragments of two adjacent n-tiles from one ldmatrix.x4: registers {0, 1}, {2, 3}.
template <bool kTrans>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[2][2], const uint16_t* row) {
  uint32_t r[4];
  ldmatrix_x4<kTrans>(r, row);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// B fragments of B = M^T (B[k][n] = M[n0 + n][k0 + k]) for the n-tiles n0 and n0 + 8: K in
// S = Q K^T, dO in dP^T = V dO^T, and their kin.
__device__ __forceinline__ void load_b_transposed(uint32_t (&b)[2][2], const uint16_t* m, int stride, int n0,
                                                  int k0, int lane) {
  load_b_pair<false>(b, m + bt_ldsm_offset(lane, stride, n0, k0));
}

// B fragments of B = M (B[k][n] = M[k0 + k][n0 + n]) for the n-tiles n0 and n0 + 8: V in
// O = P V, and dO, Q, K in dV, dK, dQ.
__device__ __forceinline__ void load_b(uint32_t (&b)[2][2], const uint16_t* m, int stride, int k0, int n0,
                                       int lane) {
  load_b_pair<true>(b, m + b_ldsm_offset(lane, stride, k0, n0));
}

// out += P B: P a warp's 16 rows of kTiles accumulator tiles (8 columns each, rounded to bf16 A
// fragments in place), B the shared tile of 8 * kTiles rows and 8 * kOutTiles columns, taken
// 16 rows at a time. The forward's O += P V, dq's dQ += dS K.
template <int kTiles, int kOutTiles>
__device__ __forceinline__ void accumulate_product(float (&out)[kOutTiles][4], const float (&p)[kTiles][4],
                                                   const uint16_t* b, int stride, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
    uint32_t pa[4];
    accumulators_to_a(pa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int j = 0; j < kOutTiles; j += 2) {
      uint32_t bf[2][2];
      load_b(bf, b, stride, 16 * kk, 8 * j, lane);
      mma_bf16(out[j], pa, bf[0]);
      mma_bf16(out[j + 1], pa, bf[1]);
    }
  }
}

// Starts copying ROWS rows of HD bf16 (time steps t0.., row t at src + t * ld; t0 < T) into
// shared memory (stride<HD>() per row) in 16-byte pieces with cp.async; rows at or past T
// become zeros (a zero V row times a zero probability must stay zero, never NaN). src and
// ld must keep 16-byte alignment. The caller commits and waits.
template <int HD, int ROWS>
__device__ __forceinline__ void load_tile(uint16_t* dst, const bf16* src, size_t ld, int t0, int T) {
  constexpr int kChunks = HD / 8;
  const bf16* tile = src + static_cast<size_t>(t0) * ld;  // offsets within the tile fit an int
#pragma unroll 1
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool in = t0 + r < T;
    cp_async_16(dst + r * stride<HD>() + c * 8, tile + (in ? r * static_cast<int>(ld) : 0) + c * 8, in);
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Stores accumulator elements i and i + 1 (one row, two adjacent columns) as a bf16 pair.
__device__ __forceinline__ void store_pair(bf16* dst, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(dst) = pack_bf16x2(lo, hi);
}

}  // namespace nfn::cuda::attention::mma_path
