// Reductions on the CPU, accumulated in double so the CPU result is the reference.
#include <omp.h>

#include <vector>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

namespace {

// Sum of squares of x[begin, end) in double, over 8 independent lanes combined in a fixed
// order: the loop vectorizes without reordering additions (no -ffast-math) and does not
// wait on one accumulator's latency.
template <typename T>
double sum_squares_range(const T* x, size_t begin, size_t end) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  size_t i = begin;
  auto value = [&](size_t j) -> double {
    if constexpr (sizeof(T) == 2) return nfn::cpu::bf16_to_f32(x[j]); else return x[j];
  };
  for (; i + kLanes <= end; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += value(i + l) * value(i + l);
  for (; i < end; ++i) acc[i % kLanes] += value(i) * value(i);
  double s = 0.0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// Each thread sums a contiguous share; the shares are added in thread order, so the result
// is the same on every run with the same thread count.
template <typename T>
double sum_squares(const T* x, size_t n) {
  const int threads = n > (1 << 16) ? omp_get_max_threads() : 1;
  std::vector<double> share(threads, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    share[t] = sum_squares_range(x, n * t / nt, n * (t + 1) / nt);
  }
  double s = 0.0;
  for (double v : share) s += v;
  return s;
}

}  // namespace

extern "C" {

nfn_status nfn_sum_squares_many(nfn_ctx* ctx, const void* const* host_bufs,
                                const size_t* host_counts, int nbufs, nfn_dtype dtype,
                                float* out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr || (nbufs > 0 && (host_bufs == nullptr || host_counts == nullptr)))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: null pointer");
  if (dtype != NFN_F32 && dtype != NFN_BF16)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: unknown dtype %d",
                static_cast<int>(dtype));
  for (int b = 0; b < nbufs; ++b)
    if (host_bufs[b] == nullptr && host_counts[b] > 0)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: buffer %d is null (count %zu)", b, host_counts[b]);
  double total = 0.0;
  for (int b = 0; b < nbufs; ++b) {
    if (dtype == NFN_F32)
      total += sum_squares(static_cast<const float*>(host_bufs[b]), host_counts[b]);
    else
      total += sum_squares(static_cast<const uint16_t*>(host_bufs[b]), host_counts[b]);
  }
  *out = static_cast<float>(total);
  return NFN_OK;
}

}  // extern "C"
