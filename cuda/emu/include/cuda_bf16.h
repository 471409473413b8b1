// bf16 for the CUDA emulator (cuda/emu): storage and round-to-nearest-even conversions, the
// semantics of the real cuda_bf16.h's __float2bfloat16_rn and __bfloat162float.
#pragma once

#include <cstdint>
#include <cstring>

struct __attribute__((aligned(2))) __nv_bfloat16 {
  uint16_t __x;
};

struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __nv_bfloat16{static_cast<uint16_t>(bits >> 16)};
}

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
