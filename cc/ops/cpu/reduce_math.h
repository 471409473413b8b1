// Row reductions written with 16 explicit partial sums: the compiler vectorizes them without
// being allowed to reorder float additions (no -ffast-math), and the result is the same on
// every run.
#pragma once

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace nfn::cpu {

constexpr int kLanes = 16;

// Combines a fixed lane array in a fixed order.
inline float combine_lanes(const float* acc) {
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

inline float row_sum(const float* x, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  for (; i < n; ++i) acc[i % kLanes] += x[i];
  return combine_lanes(acc);
}

inline float row_dot(const float* x, const float* y, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * y[i + l];
  for (; i < n; ++i) acc[i % kLanes] += x[i] * y[i];
  return combine_lanes(acc);
}

// sum of (x - center)^2: a variance without the cancellation of E[x^2] - E[x]^2.
inline float row_sum_sq_dev(const float* x, float center, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += (x[i + l] - center) * (x[i + l] - center);
  for (; i < n; ++i) acc[i % kLanes] += (x[i] - center) * (x[i] - center);
  return combine_lanes(acc);
}

inline float row_dot3(const float* x, const float* y, const float* z, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * y[i + l] * z[i + l];
  for (; i < n; ++i) acc[i % kLanes] += x[i] * y[i] * z[i];
  return combine_lanes(acc);
}

// The largest of x[0..n). GCC leaves the 16-lane form of this loop scalar, so AVX builds
// (-march=x86-64-v3) take two 8-wide max registers; the lanes are the same either way:
// lane l covers x[l], x[l + 16], ... and the lanes are combined in order.
inline float row_max(const float* x, int n) {
  float acc[kLanes];
  int i = 0;
#ifdef __AVX__
  __m256 lo = _mm256_set1_ps(-__builtin_inff()), hi = lo;
  for (; i + kLanes <= n; i += kLanes) {  // max_ps(a, b) is a > b ? a : b, as below
    lo = _mm256_max_ps(_mm256_loadu_ps(x + i), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), hi);
  }
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
#else
  for (int l = 0; l < kLanes; ++l) acc[l] = -__builtin_inff();
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
#endif
  for (; i < n; ++i) acc[i % kLanes] = x[i] > acc[i % kLanes] ? x[i] : acc[i % kLanes];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

}  // namespace nfn::cpu
