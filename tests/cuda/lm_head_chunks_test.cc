// lm_head_cross_entropy's auto chunk rows (cuda/ops/lm_head_chunks.h): GPT-2's sizes, and
// the rule they follow checked by its properties over many sizes: a multiple of 8 rows within
// 2 GiB of logits, the fewest chunks that fit, and chunks as equal as multiples of 8 allow.
#include <cstdio>

#include "cuda/ops/lm_head_chunks.h"
#include "tests/cc/expect.h"

using nfn::cuda::auto_chunk_rows;

namespace {

constexpr size_t kGpt2RowBytes = 2 * 50304;  // bf16 logits of GPT-2's padded vocabulary

constexpr size_t kLimit = size_t{1} << 31;

size_t up8(size_t n) { return (n + 7) / 8 * 8; }

// rows (a multiple of 8) keeps a chunk within 2 GiB (or is 8, the least); one chunk fewer
// would not fit in 2 GiB; and 8 rows fewer would need one chunk more: so the chunks are as
// few as fit and as equal as multiples of 8 allow.
void check_rule(int N, size_t row_bytes) {
  const size_t rows = static_cast<size_t>(auto_chunk_rows(N, row_bytes)), n = static_cast<size_t>(N);
  const size_t chunks = (n + rows - 1) / rows;
  EXPECT(rows % 8 == 0 && (rows * row_bytes <= kLimit || rows == 8), "N=%d row_bytes=%zu: %zu rows", N, row_bytes,
         rows);
  EXPECT(chunks == 1 || up8((n + chunks - 2) / (chunks - 1)) * row_bytes > kLimit,
         "N=%d row_bytes=%zu: %zu chunks of %zu rows, where one fewer fits", N, row_bytes, chunks, rows);
  EXPECT(rows == 8 || (n + rows - 9) / (rows - 8) > chunks, "N=%d row_bytes=%zu: %zu chunks of %zu rows, not equal",
         N, row_bytes, chunks, rows);
}

}  // namespace

int main() {
  // GPT-2 at micro-batch 16 is one chunk; at 64, four equal ones (not 3 x 21,344 + 1,504).
  EXPECT(auto_chunk_rows(16 * 1024, kGpt2RowBytes) == 16384, "B=16: %d", auto_chunk_rows(16 * 1024, kGpt2RowBytes));
  EXPECT(auto_chunk_rows(64 * 1024, kGpt2RowBytes) == 16384, "B=64: %d", auto_chunk_rows(64 * 1024, kGpt2RowBytes));
  EXPECT(auto_chunk_rows(48 * 1024, kGpt2RowBytes) == 16384, "B=48: %d", auto_chunk_rows(48 * 1024, kGpt2RowBytes));
  // Few rows: rounded up to 8 (the caller takes min(rows, N)).
  EXPECT(auto_chunk_rows(5, kGpt2RowBytes) == 8, "N=5: %d", auto_chunk_rows(5, kGpt2RowBytes));
  // Rows wider than 2 GiB / 8: 8 rows a chunk, the least there is.
  EXPECT(auto_chunk_rows(100, size_t{1} << 30) == 8, "huge rows: %d", auto_chunk_rows(100, size_t{1} << 30));
  for (int N : {1, 7, 8, 9, 1000, 21344, 21345, 42689, 65536, 100000, 1 << 20})
    for (size_t row_bytes : {kGpt2RowBytes, size_t{4} * 50304, size_t{2} * 128, size_t{4} * 262144})
      check_rule(N, row_bytes);
  return nfn_test::finish("lm_head_chunks_test");
}
