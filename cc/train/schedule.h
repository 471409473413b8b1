// The learning-rate schedule: linear warmup to peak_lr, then cosine decay to
// final_fraction * peak_lr at max_steps (llm.c's, whose -q is final_fraction).
#pragma once

#include <cmath>

namespace nfn {

inline float learning_rate_at(int step, int max_steps, int warmup_steps, float peak_lr, float final_fraction = 0) {
  if (step < warmup_steps) return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (max_steps <= warmup_steps) return peak_lr;
  double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(max_steps - warmup_steps);
  if (progress > 1.0) progress = 1.0;
  const double floor = static_cast<double>(peak_lr) * final_fraction;
  return static_cast<float>(floor + (peak_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace nfn
