// bf16 for the CUDA emulator (cuda/emu): storage and the conversions of the real
// cuda_bf16.h's __float2bfloat16_rn and __bfloat162float, through nfn's one host conversion.
#pragma once

#include <cstdint>

#include "cc/util/bf16.h"

struct __attribute__((aligned(2))) __nv_bfloat16 {
  uint16_t __x;
};

struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __bfloat162float(__nv_bfloat16 h) { return nfn::bf16_to_f32(h.__x); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{nfn::f32_to_bf16(f)}; }

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
