// GPT::random_parameters draws its normals on several threads; the result must be bit for
// bit what one Rng drawing every normal in tensor order gives (the definition, written out
// here), so a seed means the same model on any machine and any thread count. Also Rng::skip
// against calling next_u64 that many times.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cc/model/gpt.h"
#include "cc/util/rng.h"
#include "tests/cc/expect.h"

using namespace nfn;

int main() {
  Rng a(42), b(42);
  for (int i = 0; i < 1000; ++i) a.next_u64();
  b.skip(1000);
  EXPECT(a.next_u64() == b.next_u64(), "skip(1000) is not 1000 calls of next_u64");

  GPTConfig c;
  c.max_seq_len = 64, c.vocab_size = 1000, c.padded_vocab_size = 1024;
  c.num_layers = 3, c.num_heads = 4, c.channels = 256;  // wte, qkvw: 2+ threads each
  const uint64_t seed = 1337;
  const std::vector<float> got = GPT::random_parameters(c, seed);

  // The definition: one stream, in checkpoint order; norms' weights 1, biases 0, wte's padding
  // rows 0, wpe 0.01, the residual projections 0.02 / sqrt(2L), the rest 0.02.
  const auto layout = param_layout(c);
  std::vector<float> want(num_parameters(c), 0.f);
  Rng rng(seed);
  for (int i = 0; i < kNumParamTensors; ++i) {
    const std::string name = kParamNames[i];
    float* t = want.data() + layout[i].offset;
    float std = 0.f;
    size_t n = layout[i].count;
    if (name == "ln1w" || name == "ln2w" || name == "lnfw") {
      for (size_t k = 0; k < n; ++k) t[k] = 1.f;
    } else if (name == "wte" || name == "qkvw" || name == "fcw") {
      std = 0.02f;
    } else if (name == "wpe") {
      std = 0.01f;
    } else if (name == "attprojw" || name == "fcprojw") {
      std = 0.02f / std::sqrt(2.0f * c.num_layers);
    }
    if (name == "wte") n = static_cast<size_t>(c.vocab_size) * c.channels;
    if (std != 0.f)
      for (size_t k = 0; k < n; ++k) t[k] = std * rng.normal();
  }
  EXPECT(got.size() == want.size() && std::memcmp(got.data(), want.data(), 4 * got.size()) == 0,
         "random_parameters differs from one stream drawn in order");
  size_t nonzero = 0;
  for (float x : got) nonzero += x != 0.f;
  EXPECT(nonzero > got.size() / 2, "only %zu of %zu parameters are nonzero", nonzero, got.size());
  return nfn_test::finish("random_parameters_test");
}
