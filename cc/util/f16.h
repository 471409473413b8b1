// IEEE half precision (F16) widened to f32, exactly: every half is an f32 (subnormals become
// normal, infinities stay infinite, a NaN keeps its payload). What checkpoints read.
#pragma once

#include <cstdint>
#include <cstring>

namespace nfn {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);  // rebias the exponent
  } else {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // zero or subnormal: exact
    std::memcpy(&bits, &magnitude, sizeof bits);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace nfn
