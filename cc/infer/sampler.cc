#include "cc/infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace nfn {

std::string validate_sampling(const SamplingConfig& c) {
  if (!(c.temperature >= 0.f) || !std::isfinite(c.temperature))
    return "temperature must be a finite number >= 0 (got " + std::to_string(c.temperature) + ")";
  if (c.top_k < 0) return "top_k must be >= 0 (got " + std::to_string(c.top_k) + ")";
  if (!(c.top_p > 0.0 && c.top_p <= 1.0)) return "top_p must be in (0, 1] (got " + std::to_string(c.top_p) + ")";
  return "";
}

int32_t Sampler::sample(const float* logits, int V) {
  if (config_.temperature == 0.f || config_.top_k == 1)
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);  // first maximum
  // Candidates by descending logit (ties by id, so the order is deterministic).
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int n = V;
  if (config_.top_k > 0 && config_.top_k < V) {
    n = config_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), by_logit);
  } else if (config_.top_p < 1.0) {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax of logit / temperature over the candidates, in double.
  const double inv_t = 1.0 / config_.temperature;
  double top = -INFINITY;
  for (int i = 0; i < n; ++i) top = std::max(top, static_cast<double>(logits[order_[i]]));
  probs_.resize(n);
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += probs_[i] = std::exp((logits[order_[i]] - top) * inv_t);
  if (config_.top_p < 1.0) {
    // Keep the shortest prefix (candidates are sorted) whose share reaches top_p. "Reaches"
    // allows the sums' rounding (1e-9 relative): ten equal candidates at top_p 0.3 keep
    // three, though 0.3 * 10 is 3.0000000000000004 in double.
    const double needed = config_.top_p * total * (1 - 1e-9);
    double kept = 0.0;
    int keep = 0;
    while (keep < n && kept < needed) kept += probs_[keep++];
    n = std::max(keep, 1);
    total = std::accumulate(probs_.begin(), probs_.begin() + n, 0.0);
  }
  const double u = static_cast<double>(rng_.uniform()) * total;
  double acc = 0.0;
  for (int i = 0; i < n; ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_[n - 1];  // u within rounding of the total
}

}  // namespace nfn
