// The learning-rate schedule: linear warmup, then cosine decay to zero at max_steps.
#pragma once

#include <cmath>

namespace nfn {

inline float learning_rate_at(int step, int max_steps, int warmup_steps, float peak_lr) {
  if (step < warmup_steps) return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (max_steps <= warmup_steps) return peak_lr;
  double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(max_steps - warmup_steps);
  if (progress > 1.0) progress = 1.0;
  return static_cast<float>(peak_lr * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace nfn
