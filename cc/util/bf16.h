// bf16 is the upper half of an IEEE fp32: widening is a shift, narrowing rounds to nearest
// even (NaN stays NaN). The one host-side conversion for the op library, checkpoints and
// the model.
#pragma once

#include <cstdint>
#include <cstring>

namespace nfn {

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace nfn
