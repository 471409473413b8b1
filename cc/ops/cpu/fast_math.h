// exp and tanh written with plain float arithmetic so that loops calling them vectorize
// (libm's expf/tanhf are calls, one element at a time). Accurate to a few ulp over the
// range that matters for softmax and GELU.
#pragma once

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

}  // namespace nfn::cpu
