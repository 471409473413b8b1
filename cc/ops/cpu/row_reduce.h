// Column sums over many rows into a parameter gradient, split across threads by rows:
// each thread sums its rows into a private buffer, then the buffers are added in thread
// order, so the result is deterministic for a given thread count.
#pragma once

#include <omp.h>

#include <vector>

namespace nfn::cpu {

// For every row r in [0, rows): row_fn(r, partials...) adds its contribution into the
// `nout` private buffers of `width` floats; afterwards outs[k][c] += sum of partials[k][c].
template <typename RowFn>
void reduce_rows_into(long rows, int width, float* const* outs, int nout, RowFn row_fn) {
  const int nth = omp_get_max_threads();
  std::vector<float> partial(static_cast<size_t>(nth) * nout * width, 0.f);
#pragma omp parallel num_threads(nth)
  {
    const int th = omp_get_thread_num(), n = omp_get_num_threads();
    float* mine = partial.data() + static_cast<size_t>(th) * nout * width;
    const long r0 = rows * th / n, r1 = rows * (th + 1) / n;
    for (long r = r0; r < r1; ++r) row_fn(r, mine);
#pragma omp barrier
    // Each thread finishes a slice of the columns, adding the partials in thread order.
    const int c0 = static_cast<int>(static_cast<long>(width) * th / n);
    const int c1 = static_cast<int>(static_cast<long>(width) * (th + 1) / n);
    for (int k = 0; k < nout; ++k) {
      if (outs[k] == nullptr) continue;
      for (int c = c0; c < c1; ++c) {
        float s = 0.f;
        for (int t = 0; t < n; ++t) s += partial[(static_cast<size_t>(t) * nout + k) * width + c];
        outs[k][c] += s;
      }
    }
  }
}

// dst[c] += the sum over rows of x[r][c] (x is rows x width).
inline void add_column_sums(float* dst, const float* x, long rows, int width) {
  float* outs[1] = {dst};
  reduce_rows_into(rows, width, outs, 1, [&](long r, float* partial) {
    const float* row = x + r * width;
    for (int c = 0; c < width; ++c) partial[c] += row[c];
  });
}

}  // namespace nfn::cpu
