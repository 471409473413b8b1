// GPT-2's tanh GELU and its derivative, shared by the activation ops and linear's epilogue.
#pragma once

#include "cc/ops/cpu/fast_math.h"

namespace nfn::cpu {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

inline float gelu(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.f + fast_tanh(u));
}

inline float gelu_grad(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float t = fast_tanh(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluScale * (1.f + 3.f * kGeluCubic * x * x);
}

}  // namespace nfn::cpu
