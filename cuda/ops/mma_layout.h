// Which elements of an mma.sync.m16n8k16 (bf16 inputs, f32 accumulators) each lane of a warp
// holds, and the fragment loads built on them. Plain C++ as well as CUDA, so that
// tests/cuda/mma_layout_test.cc checks the same functions the attention kernels use against
// the PTX ISA's fragment tables, on a machine without a GPU.
//
// Per the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4, and each 32-bit register holding two bf16 (lower index in
// the low half):
//   A (16x16, row-major): register r holds (row g + 8 * (r & 1), cols c, c + 1), c = 2t + 8 * (r >> 1)
//   B (16x8, k x n):      register r holds (k, k + 1; col n = g), k = 2t + 8r
//   C/D (16x8, f32):      element i is (row g + 8 * (i >> 1), col 2t + (i & 1))
#pragma once

#include <cstdint>
#include <cstring>

#include "cc/util/bf16.h"  // the host conversion

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define NFN_HOST_DEVICE __host__ __device__ __forceinline__
#define NFN_UNROLL _Pragma("unroll")
#else
#define NFN_HOST_DEVICE inline
#define NFN_UNROLL
#endif

namespace nfn::cuda::mma {

NFN_HOST_DEVICE int group_of(int lane) { return lane >> 2; }
NFN_HOST_DEVICE int quad_of(int lane) { return lane & 3; }

// A: the row and the first column of the pair in register r (0..3).
NFN_HOST_DEVICE int a_row(int lane, int r) { return group_of(lane) + 8 * (r & 1); }
NFN_HOST_DEVICE int a_col(int lane, int r) { return 2 * quad_of(lane) + 8 * (r >> 1); }
// B: the first k of the pair in register r (0..1), and the column n.
NFN_HOST_DEVICE int b_k(int lane, int r) { return 2 * quad_of(lane) + 8 * r; }
NFN_HOST_DEVICE int b_n(int lane) { return group_of(lane); }
// C/D: the row and column of accumulator element i (0..3).
NFN_HOST_DEVICE int c_row(int lane, int i) { return group_of(lane) + 8 * (i >> 1); }
NFN_HOST_DEVICE int c_col(int lane, int i) { return 2 * quad_of(lane) + (i & 1); }

// Two floats as a bf16 pair: lo in the low half.
NFN_HOST_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
#ifdef __CUDA_ARCH__
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo, stored first (low half)
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return static_cast<uint32_t>(nfn::f32_to_bf16(lo)) | static_cast<uint32_t>(nfn::f32_to_bf16(hi)) << 16;
#endif
}

// Elements (row, col) and (row, col + 1) of a row-major matrix of 16-bit values, as one
// register (col even, stride even: a 4-byte aligned load).
NFN_HOST_DEVICE uint32_t pair_in_row(const uint16_t* m, int stride, int row, int col) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(m + row * stride + col);
#else
  uint32_t v;
  std::memcpy(&v, m + row * stride + col, 4);  // little-endian: (row, col) in the low half
  return v;
#endif
}

// Elements (row, col) and (row + 1, col): two 16-bit loads.
NFN_HOST_DEVICE uint32_t pair_in_col(const uint16_t* m, int stride, int row, int col) {
  return static_cast<uint32_t>(m[row * stride + col]) |
         static_cast<uint32_t>(m[(row + 1) * stride + col]) << 16;
}

// A fragment of the 16x16 block at (row0, col0) of a row-major matrix.
NFN_HOST_DEVICE void load_a(uint32_t (&a)[4], const uint16_t* m, int stride, int row0, int col0,
                            int lane) {
NFN_UNROLL
  for (int r = 0; r < 4; ++r) a[r] = pair_in_row(m, stride, row0 + a_row(lane, r), col0 + a_col(lane, r));
}

// B fragment (k x n = 16x8) of B = M^T for a row-major M, B[k][n] = M[n0 + n][k0 + k]: K in
// S = Q K^T (pairs run along M's rows, one load each).
NFN_HOST_DEVICE void load_b_transposed(uint32_t (&b)[2], const uint16_t* m, int stride, int n0, int k0,
                                       int lane) {
NFN_UNROLL
  for (int r = 0; r < 2; ++r) b[r] = pair_in_row(m, stride, n0 + b_n(lane), k0 + b_k(lane, r));
}

// B fragment of B = M for a row-major M, B[k][n] = M[k0 + k][n0 + n]: V in O = P V (pairs run
// down M's columns, two loads each).
NFN_HOST_DEVICE void load_b(uint32_t (&b)[2], const uint16_t* m, int stride, int k0, int n0, int lane) {
NFN_UNROLL
  for (int r = 0; r < 2; ++r) b[r] = pair_in_col(m, stride, k0 + b_k(lane, r), n0 + b_n(lane));
}

// The A fragment (16 rows x 16 columns) made of two accumulator tiles side by side: lo holds
// columns 0..7, hi columns 8..15. The C layout of lo/hi matches the A layout of their
// columns, so P (or dS) goes from the S = Q K^T accumulators into O += P V without moving
// between lanes.
NFN_HOST_DEVICE void accumulators_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16x2(lo[0], lo[1]);  // row g,     cols 2t, 2t+1
  a[1] = pack_bf16x2(lo[2], lo[3]);  // row g + 8, cols 2t, 2t+1
  a[2] = pack_bf16x2(hi[0], hi[1]);  // row g,     cols 8 + 2t, 8 + 2t + 1
  a[3] = pack_bf16x2(hi[2], hi[3]);  // row g + 8, cols 8 + 2t, 8 + 2t + 1
}

}  // namespace nfn::cuda::mma
