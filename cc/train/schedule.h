// The learning-rate schedules: linear warmup to peak_lr, then cosine decay to
// final_fraction * peak_lr at max_steps (llm.c's, whose -q is final_fraction); or nanochat's,
// constant after the warmup and linear to final_fraction * peak_lr over the last
// warmdown_ratio of the steps.
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

inline float warmdown_learning_rate_at(int step, int max_steps, int warmup_steps, double warmdown_ratio,
                                       float peak_lr, float final_fraction = 0) {
  if (step < warmup_steps) return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  const double warmdown = std::round(warmdown_ratio * max_steps);
  const double left = static_cast<double>(max_steps - step);
  if (left >= warmdown || warmdown <= 0) return peak_lr;
  const double progress = left / warmdown;  // 1 at the warmdown's start, 0 at the end
  return static_cast<float>(peak_lr * (progress + (1 - progress) * final_fraction));
}

}  // namespace nfn
