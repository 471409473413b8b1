// IEEE half precision (F16) widened to f32, exactly: every half is an f32 (subnormals become
// normal, infinities stay infinite, a NaN keeps its payload), and f32 rounded to the nearest
// even half. What checkpoints and quantized blocks (quant.h) hold; the widening also runs in
// CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define NFN_HOST_DEVICE __host__ __device__
#else
#define NFN_HOST_DEVICE
#endif

namespace nfn {

NFN_HOST_DEVICE inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);  // rebias the exponent
  } else {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // zero or subnormal: exact
    memcpy(&bits, &magnitude, sizeof bits);
    bits |= sign;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; past 65504 is infinity, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                 // rounds past 65504
  if (abs < 0x38800000u)                                         // a subnormal half (or 0)
    return sign | static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 16777216.f));  // units of 2^-24
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);    // 10 mantissa bits, ties to even
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

}  // namespace nfn
