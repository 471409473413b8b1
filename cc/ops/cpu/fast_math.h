// exp and tanh written with plain float arithmetic so that loops calling them vectorize
// (libm's expf/tanhf are calls, one element at a time). Accurate to a few ulp over the
// range that matters for softmax and GELU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace nfn::cpu {

// e^x: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n in the exponent bits.
inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : x;  // below this the result is 0 to f32 precision anyway
  x = x > 88.3f ? 88.3f : x;  // keeps 2^n finite
  const float n = (x * 1.44269504089f + 12582912.f) - 12582912.f;  // round to nearest
  float r = x - n * 0.693145751953125f;  // ln2 split in two for an exact first product
  r = r - n * 1.428606765330187e-06f;
  float p = 1.3981999e-3f;
  p = p * r + 8.3334519e-3f;
  p = p * r + 4.1665795e-2f;
  p = p * r + 1.6666665e-1f;
  p = p * r + 5.0000001e-1f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1); absolute error about 1e-7 (what GELU needs).
inline float fast_tanh(float x) { return 1.f - 2.f / (fast_exp(2.f * x) + 1.f); }

// tanh(x) within a few ulp relative, near 0 too (fast_tanh's 1 - 2/(e^{2x}+1) cancels there):
// Cephes' tanhf, an odd polynomial below |x| = 0.625 and (1 - e)/(1 + e), e = e^{-2|x|}, above.
inline float precise_tanh(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float e = fast_exp(-2.f * std::fabs(x));
  const float large = std::copysign((1.f - e) / (1.f + e), x);
  return std::fabs(x) < 0.625f ? small : large;
}

// 1 - tanh(x)^2 = 4e / (1 + e)^2, e = e^{-2|x|}: relative accuracy where tanh saturates, which
// 1 - t*t loses.
inline float tanh_grad(float x) {
  const float e = fast_exp(-2.f * std::fabs(x));
  return 4.f * e / ((1.f + e) * (1.f + e));
}

}  // namespace nfn::cpu
