// Picks the next token from a row of logits: greedy (temperature 0), or a draw from the
// temperature-scaled softmax restricted to the top k tokens and then to the smallest set
// whose probability reaches top_p. The RNG is seeded, so a seed fixes the whole sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/util/rng.h"

namespace nfn {

struct SamplingConfig {
  float temperature = 1.f;  // 0: greedy
  int top_k = 0;            // 0: no limit
  double top_p = 1.0;       // 1: no limit (double: 0.3 as the user wrote it, not float's 0.30000001)
  uint64_t seed = 0;
};

// "" when usable, else one line naming the bad field.
std::string validate_sampling(const SamplingConfig& c);

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& c) : config_(c), rng_(c.seed) {}
  int32_t sample(const float* logits, int V);

 private:
  SamplingConfig config_;
  Rng rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

}  // namespace nfn
