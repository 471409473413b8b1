// Which elements of an mma.sync.m16n8k16 (bf16 inputs, f32 accumulators) each lane of a warp
// holds, and where each lane points ldmatrix to load them. Plain C++ as well as CUDA, so that
// tests/cuda/mma_layout_test.cc checks the same functions the attention kernels use against
// the PTX ISA's fragment and ldmatrix tables, on a machine without a GPU.
//
// Per the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4, and each 32-bit register holding two bf16 (lower index in
// the low half):
//   A (16x16, row-major): register r holds (row g + 8 * (r & 1), cols c, c + 1), c = 2t + 8 * (r >> 1)
//   B (16x8, k x n):      register r holds (k, k + 1; col n = g), k = 2t + 8r
//   C/D (16x8, f32):      element i is (row g + 8 * (i >> 1), col 2t + (i & 1))
#pragma once

#include <cstdint>

#include "cc/util/bf16.h"  // the host conversion

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define NFN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NFN_HOST_DEVICE inline
#endif

namespace nfn::cuda::mma {

NFN_HOST_DEVICE int group_of(int lane) { return lane >> 2; }
NFN_HOST_DEVICE int quad_of(int lane) { return lane & 3; }

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

// Fragments come from shared memory through ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16
// (attention_mma.cuh), which loads four 8x8 matrices of 16-bit values: lane l gives the address
// of row l % 8 of matrix l / 8 (8 contiguous values, 16-byte aligned), and register i of every
// lane receives from matrix i the pair at (row lane / 4; columns 2 (lane % 4), + 1), or with
// .trans the pair at (rows 2 (lane % 4), + 1; column lane / 4), lower index in the low half.
// Below: the element offset each lane gives, into a row-major matrix with `stride` elements
// a row, so that the four registers come out as mma fragments.

// x4: the A fragment of the 16x16 block at (row0, col0), registers in order. Matrix i holds
// rows row0 + 8 (i & 1).., columns col0 + 8 (i >> 1)..
NFN_HOST_DEVICE int a_ldsm_offset(int lane, int stride, int row0, int col0) {
  return (row0 + (lane & 15)) * stride + col0 + 8 * (lane >> 4);
}

// x4: B fragments of B = M^T (B[k][n] = M[n0 + n][k0 + k], k < 16) for two n-tiles, n0 and
// n0 + 8: registers {0, 1} and {2, 3}. K in S = Q K^T: M's rows are keys, pairs run along them.
// Matrix i holds rows n0 + 8 (i >> 1).., columns k0 + 8 (i & 1)..
NFN_HOST_DEVICE int bt_ldsm_offset(int lane, int stride, int n0, int k0) {
  return (n0 + (lane & 7) + 8 * (lane >> 4)) * stride + k0 + 8 * ((lane >> 3) & 1);
}

// x4 .trans: B fragments of B = M (B[k][n] = M[k0 + k][n0 + n], k < 16) for two n-tiles, n0
// and n0 + 8: registers {0, 1} and {2, 3}. V in O = P V: pairs run down M's columns, which
// .trans gathers. Matrix i holds rows k0 + 8 (i & 1).., columns n0 + 8 (i >> 1)..
NFN_HOST_DEVICE int b_ldsm_offset(int lane, int stride, int k0, int n0) {
  return (k0 + (lane & 15)) * stride + n0 + 8 * (lane >> 4);
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
