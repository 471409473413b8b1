// How many rows of the LM head's logits lm_head_cross_entropy computes at a time when the
// option lm_head_rows is 0 (auto): plain C++, tested on the host (tests/cuda:lm_head_chunks_test).
#pragma once

#include <algorithm>
#include <cstddef>

namespace nfn::cuda {

// Logits per chunk, in the storage dtype: at most 2 GiB, so GPT-2's 16 x 1024 tokens (1.6 GB
// in bf16) are one chunk: three full-size GEMMs, and dwte read and written once.
constexpr size_t kLmHeadChunkBytes = size_t{1} << 31;

// Rows a chunk of N rows of `row_bytes` logits each: within kLmHeadChunkBytes, a multiple of
// 8 (so every chunk's GEMM operands stay 16-byte aligned), and equal chunks rather than full
// ones and a small rest: 64 x 1024 GPT-2 tokens are 4 chunks of 16,384 rows, not 3 of 21,344
// and one of 1,504, whose three GEMMs would run far below the others' speed.
inline int auto_chunk_rows(int N, size_t row_bytes) {
  const size_t most = std::max<size_t>(8, kLmHeadChunkBytes / row_bytes / 8 * 8);
  const size_t n = static_cast<size_t>(N), chunks = (n + most - 1) / most;
  const size_t even = ((n + chunks - 1) / chunks + 7) / 8 * 8;  // rounded up to 8 rows: at most `most`
  return static_cast<int>(std::min(most, even));
}

}  // namespace nfn::cuda
