// Packing an f32 operand for oneDNN's matmul (gemm_bf16.cc): op(X) of a stored matrix into a
// row-major buffer (dense, or with padded rows when transposed), as f32 or rounded to bf16
// (nfn::f32_to_bf16, bit for bit).
//
// The transposed copy works in 8x8 blocks held in AVX2 registers: a scalar copy with the
// transposition in its index runs at 1.3-3.8 ns an element on a 2-core AVX2 host, ten times
// the straight copy, and matmul=bf16 transposes every dW product's gradient and the LM head's
// dlogits (about 36M elements a step at the trainer benchmark's geometry). This one runs at
// 0.2-0.5 ns an element on two threads, 5-10x faster.
#pragma once

#include <cstdint>
#include <vector>

namespace nfn::cpu {

// The row stride of pack's result: `cols` for a straight copy; for a transposed one `rows`
// rounded up to an odd multiple of 16, so that the rows an 8x8 block writes never lie a
// multiple of 4 KiB apart (at rows = 2048, 4 KiB apart in bf16, the copy runs four times
// slower).
int64_t packed_ld(int64_t rows, int64_t cols, bool trans);

// Copies op(X) of a stored (rows, cols, ld) f32 matrix into dst, grown as needed: as a
// row-major (rows, cols) matrix, or (cols, rows) when `trans`, with row stride
// packed_ld(rows, cols, trans); returns dst's data. Out is float or uint16_t (bf16).
template <typename Out>
Out* pack(const float* src, int64_t rows, int64_t cols, int64_t ld, bool trans, std::vector<Out>* dst);

// On the calling thread: a stored (rows, cols, ld) f32 block rounded to bf16 into dst, as
// (rows, cols) with row stride ldd, or transposed to (cols, rows) when `trans`.
void round_bf16_serial(const float* src, int64_t rows, int64_t cols, int64_t ld, bool trans, uint16_t* dst,
                       int64_t ldd);

}  // namespace nfn::cpu
