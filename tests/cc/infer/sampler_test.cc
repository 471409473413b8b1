// The sampler against distributions computed here: greedy is the first argmax; with a
// temperature the empirical frequencies match softmax(logits / T); top-k and top-p draw
// only from the sets computed here and in the renormalised proportions; a seed repeats.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <vector>

#include "cc/infer/sampler.h"
#include "tests/cc/expect.h"


static const std::vector<float> kLogits = {1.0f, 2.5f, -1.0f, 2.5f, 0.3f, 1.7f, -3.0f, 0.9f};

// Expected probabilities: softmax(l / T) over `allowed`, zero elsewhere.
static std::vector<double> expected(float T, const std::vector<bool>& allowed) {
  std::vector<double> p(kLogits.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (allowed[i]) z += p[i] = std::exp(kLogits[i] / static_cast<double>(T));
  for (double& x : p) x /= z;
  return p;
}

static void check_frequencies(const char* what, nfn::SamplingConfig cfg, const std::vector<double>& want) {
  nfn::Sampler s(cfg);
  const int draws = 200000;
  std::vector<int> count(kLogits.size(), 0);
  for (int i = 0; i < draws; ++i) ++count[s.sample(kLogits.data(), static_cast<int>(kLogits.size()))];
  for (size_t i = 0; i < want.size(); ++i) {
    const double f = static_cast<double>(count[i]) / draws;
    // 5 standard deviations of a binomial frequency, and exact zeros where nothing may be drawn.
    const double sd = std::sqrt(want[i] * (1 - want[i]) / draws);
    EXPECT(want[i] == 0 ? count[i] == 0 : std::fabs(f - want[i]) <= 5 * sd + 1e-9,
           "%s: token %zu drawn with frequency %.4f, expected %.4f", what, i, f, want[i]);
  }
}

int main() {
  const int V = static_cast<int>(kLogits.size());
  nfn::SamplingConfig greedy;
  greedy.temperature = 0;
  EXPECT(nfn::Sampler(greedy).sample(kLogits.data(), V) == 1, "greedy takes the first maximum");

  nfn::SamplingConfig plain;
  plain.seed = 3;
  check_frequencies("T=1", plain, expected(1.f, std::vector<bool>(V, true)));
  plain.temperature = 0.5f;
  check_frequencies("T=0.5", plain, expected(0.5f, std::vector<bool>(V, true)));

  // top_k = 3: the two 2.5s and 1.7.
  nfn::SamplingConfig k3;
  k3.top_k = 3, k3.seed = 4;
  check_frequencies("top_k=3", k3, expected(1.f, {false, true, false, true, false, true, false, false}));

  // top_p = 0.7 at T=1: sorted probabilities are .306 .306 .137 .091 ...; the first three
  // reach .749 >= .7, two (.612) do not.
  nfn::SamplingConfig p7;
  p7.top_p = 0.7f, p7.seed = 5;
  check_frequencies("top_p=0.7", p7, expected(1.f, {false, true, false, true, false, true, false, false}));
  // top_p so small that only the first candidate (lowest id among the ties) survives.
  nfn::SamplingConfig tiny;
  tiny.top_p = 0.01f;
  check_frequencies("top_p=0.01", tiny, {0, 1, 0, 0, 0, 0, 0, 0});

  // Equal candidates: a prefix whose share is exactly top_p (as written in decimal) reaches
  // it, though the product of top_p and the total may round above the prefix's sum (0.28 * 25
  // is 7.000000000000001 in double; in float 0.3 is 0.30000001).
  for (const auto& [n, p, keep] : std::vector<std::tuple<int, double, int>>{
           {10, 0.1, 1}, {10, 0.3, 3}, {10, 0.61, 7}, {25, 0.28, 7}, {100, 0.55, 55}}) {
    const std::vector<float> flat(n, 0.0f);
    nfn::SamplingConfig c;
    c.top_p = p, c.seed = 8;
    nfn::Sampler s(c);
    int most = 0;
    for (int i = 0; i < 100 * n; ++i) most = std::max(most, s.sample(flat.data(), n));
    EXPECT(most == keep - 1, "top_p=%g over %d equal candidates: drew up to id %d, expected only ids below %d", p, n,
           most, keep);
  }

  // The same seed draws the same sequence; another seed another one.
  auto draw = [&](uint64_t seed) {
    nfn::SamplingConfig c;
    c.seed = seed;
    nfn::Sampler s(c);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(kLogits.data(), V));
    return out;
  };
  EXPECT(draw(9) == draw(9), "same seed, different draws");
  EXPECT(draw(9) != draw(10), "different seeds, same 64 draws");

  nfn::SamplingConfig bad;
  bad.top_p = 0;
  EXPECT(nfn::validate_sampling(bad).find("top_p") == 0, "top_p 0 refused");
  bad = {};
  bad.temperature = -1;
  EXPECT(nfn::validate_sampling(bad).find("temperature") == 0, "negative temperature refused");
  bad = {};
  bad.top_k = -2;
  EXPECT(nfn::validate_sampling(bad).find("top_k") == 0, "negative top_k refused");
  EXPECT(nfn::validate_sampling({}).empty(), "defaults accepted");

  return nfn_test::finish("sampler_test");
}
