#include "cc/model/gpt_config.h"

#include <algorithm>
#include <cstdint>

namespace nfn {

int pad_vocab(int vocab_size) {
  return static_cast<int>(std::min<int64_t>((static_cast<int64_t>(vocab_size) + 127) / 128 * 128, INT32_MAX));
}

bool param_decays(int tensor) {
  // wte, wpe, qkvw, attprojw, fcw, fcprojw.
  return tensor == 0 || tensor == 1 || tensor == 4 || tensor == 6 || tensor == 10 || tensor == 12;
}

namespace {
struct Preset {
  const char* name;
  int layers, heads, channels, seq;
};
constexpr Preset kPresets[] = {
    {"gpt2-124m", 12, 12, 768, 1024}, {"gpt2-350m", 24, 16, 1024, 1024},
    {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1558m", 48, 25, 1600, 1024},
    // GPT-3's sizes that fit one GPU, as the paper's Table 2.1 gives them; XL's heads are 16 of
    // 128 channels (the table says 24, which does not divide 2048).
    {"gpt3-125m", 12, 12, 768, 2048},   {"gpt3-350m", 24, 16, 1024, 2048},
    {"gpt3-760m", 24, 16, 1536, 2048},  {"gpt3-1.3b", 24, 16, 2048, 2048},
    {"gpt3-2.7b", 32, 32, 2560, 2048},  {"tiny", 4, 4, 128, 128},
};
}  // namespace

bool preset_config(const std::string& name, GPTConfig* out) {
  for (const auto& p : kPresets) {
    if (name == p.name) {
      out->num_layers = p.layers;
      out->num_heads = p.heads;
      out->channels = p.channels;
      out->max_seq_len = p.seq;
      return true;
    }
  }
  return false;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace nfn
