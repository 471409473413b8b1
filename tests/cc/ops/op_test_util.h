// Helpers for the CPU op tests: a check macro, random tensors, and the finite-difference
// gradient check every backward is held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"
#include "tests/cc/expect.h"

namespace nfn_test {

// A float's bit pattern and back, for tests that compare results bit for bit.
inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline std::vector<float> random_vec(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Largest |a - b| / (atol + rtol * |b|) over the elements; <= 1 means within tolerance.
inline double worst_ratio(const float* a, const double* b, size_t n, double atol, double rtol) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double r = std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i]));
    if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r;
  }
  return worst;
}

inline void expect_close(const char* what, const float* got, const std::vector<double>& want,
                         double atol, double rtol) {
  double r = worst_ratio(got, want.data(), want.size(), atol, rtol);
  EXPECT(r <= 1.0, "%s: worst error %.3g x tolerance", what, r);
}

inline void expect_close(const char* what, const std::vector<float>& got,
                         const std::vector<double>& want, double atol, double rtol) {
  EXPECT(got.size() == want.size(), "%s: size %zu vs %zu", what, got.size(), want.size());
  expect_close(what, got.data(), want, atol, rtol);
}

// Central differences of a scalar loss L(x) at every element of x (in place, restored);
// the loss is computed by `loss` in double from the op's f32 outputs.
inline std::vector<double> numeric_grad(std::vector<float>& x, const std::function<double()>& loss,
                                        float h = 1e-2f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

// sum(w * y) for a fixed random weighting w: a scalar loss whose dL/dy is w.
inline double weighted_sum(const std::vector<float>& y, const std::vector<float>& w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

// Checks that `status` is NFN_ERR_INVALID_ARGUMENT and that the message names the op.
inline void expect_invalid(nfn_ctx* ctx, nfn_status status, const char* op, const char* what) {
  EXPECT(status == NFN_ERR_INVALID_ARGUMENT, "%s: %s gave status %d", op, what, status);
  std::string msg = nfn_ctx_last_error(ctx);
  EXPECT(msg.rfind(std::string(op) + ":", 0) == 0 && msg.find('\n') == std::string::npos,
         "%s: %s message is not one line naming the op: '%s'", op, what, msg.c_str());
}

}  // namespace nfn_test
