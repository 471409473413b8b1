// The row reductions of cc/ops/cpu/reduce_math.h against their definition written here: 16
// lanes, lane l summing (or taking the largest of) x[l], x[l + 16], ..., the lanes then
// combined in order. The results must match bit for bit, for every length from 0 to 80 (whole
// 16-blocks and ragged tails), and row_max must keep its meaning where x holds infinities,
// NaNs (skipped: a comparison with NaN is false) and ties of +0 and -0.
//
// Built with the library's -march so that the AVX form of row_max is the one tested.
#include <cmath>
#include <limits>
#include <vector>

#include "cc/ops/cpu/reduce_math.h"
#include "tests/cc/expect.h"
#include "tests/cc/ops/op_test_util.h"

using nfn_test::bits_of;

namespace {

constexpr int kLanes = 16;

float want_sum(const float* x, int n) {
  float acc[kLanes] = {};
  for (int i = 0; i < n; ++i) acc[i % kLanes] += x[i];
  float s = 0.f;
  for (float a : acc) s += a;
  return s;
}

float want_max(const float* x, int n) {
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i)
    if (x[i] > acc[i % kLanes]) acc[i % kLanes] = x[i];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l)
    if (acc[l] > m) m = acc[l];
  return m;
}

void check_row(const std::vector<float>& x, int n, const char* what) {
  const float got_max = nfn::cpu::row_max(x.data(), n), ref_max = want_max(x.data(), n);
  EXPECT(bits_of(got_max) == bits_of(ref_max), "%s n=%d: row_max %g, want %g", what, n, got_max, ref_max);
  const float got_sum = nfn::cpu::row_sum(x.data(), n), ref_sum = want_sum(x.data(), n);
  EXPECT(bits_of(got_sum) == bits_of(ref_sum) || (std::isnan(got_sum) && std::isnan(ref_sum)),
         "%s n=%d: row_sum %g, want %g", what, n, got_sum, ref_sum);
}

}  // namespace

int main() {
#ifdef __AVX__
  std::printf("reduce_math_test: the AVX form of row_max\n");
#else
  std::printf("reduce_math_test: the portable form of row_max\n");
#endif
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int n = 0; n <= 80; ++n) {
    std::vector<float> x = nfn_test::random_vec(n + 1, static_cast<unsigned>(n + 1), 5.f);
    check_row(x, n, "random");
    for (int at = 0; at < n; at += 7) {  // one special value at a time, in every lane position
      std::vector<float> y = x;
      for (float special : {inf, -inf, nan, 1e30f}) {
        y[at] = special;
        check_row(y, n, special == inf ? "+inf" : special == -inf ? "-inf" : special == 1e30f ? "large" : "nan");
      }
    }
    std::vector<float> all_neg_inf(n + 1, -inf), zeros(n + 1, 0.f);
    check_row(all_neg_inf, n, "all -inf");  // a fully masked row: the max is -inf
    for (int i = 0; i < n; i += 2) zeros[i] = -0.f;
    check_row(zeros, n, "+0 and -0");
  }
  // The largest value wins wherever it sits; a NaN never becomes the max.
  std::vector<float> x(37, 1.f);
  x[35] = 7.f;
  x[3] = nan;
  EXPECT(nfn::cpu::row_max(x.data(), 37) == 7.f, "row_max with a NaN and a 7 in the tail: %g", nfn::cpu::row_max(x.data(), 37));
  return nfn_test::finish("reduce_math_test");
}
