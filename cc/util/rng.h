// A small deterministic RNG (splitmix64) with a one-word state that checkpoints can save,
// and the same numbers on every platform (std::normal_distribution is not portable).
#pragma once

#include <cmath>
#include <cstdint>

namespace nfn {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += kGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 bits, as float.
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Standard normal by Box-Muller (one value per call; no cached second value, so the state
  // alone determines the stream).
  float normal() {
    double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }
  // As if next_u64 had been called n times (the state after k calls is seed + k * gamma), so
  // parts of one stream can be drawn in parallel; normal() takes two calls.
  void skip(uint64_t n) { state_ += n * kGamma; }

 private:
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  uint64_t state_;
};

}  // namespace nfn
