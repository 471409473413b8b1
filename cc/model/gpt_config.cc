#include "cc/model/gpt_config.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace nfn {

const std::array<const char*, kNumParamTensors> kParamNames = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

std::array<ParamTensor, kNumParamTensors> param_layout(const GPTConfig& c) {
  const size_t V = c.padded_vocab_size, T = c.max_seq_len, L = c.num_layers, C = c.channels;
  std::array<std::vector<size_t>, kNumParamTensors> shapes = {{
      {V, C}, {T, C}, {L, C}, {L, C}, {L, 3 * C, C}, {L, 3 * C}, {L, C, C}, {L, C},
      {L, C}, {L, C}, {L, 4 * C, C}, {L, 4 * C}, {L, C, 4 * C}, {L, C}, {C}, {C}}};
  std::array<ParamTensor, kNumParamTensors> out;
  size_t offset = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    size_t count = 1;
    for (size_t d : shapes[i]) count *= d;
    // wte, wpe and the four weight matrices decay; biases and norm weights do not.
    bool decay = i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
    out[i] = ParamTensor{kParamNames[i], shapes[i], count, offset, decay};
    offset += count;
  }
  return out;
}

size_t num_parameters(const GPTConfig& c) {
  auto layout = param_layout(c);
  return layout.back().offset + layout.back().count;
}

int pad_vocab(int vocab_size) {
  return static_cast<int>(std::min<int64_t>((static_cast<int64_t>(vocab_size) + 127) / 128 * 128, INT32_MAX));
}

std::string validate_config(const GPTConfig& c) {
  if (c.num_layers < 1) return "num_layers must be at least 1 (got " + std::to_string(c.num_layers) + ")";
  if (c.num_heads < 1) return "num_heads must be at least 1 (got " + std::to_string(c.num_heads) + ")";
  if (c.channels < 1 || c.channels % c.num_heads != 0)
    return "channels (" + std::to_string(c.channels) + ") must be a positive multiple of num_heads (" +
           std::to_string(c.num_heads) + ")";
  if (c.max_seq_len < 1) return "max_seq_len must be at least 1";
  if (c.vocab_size < 2) return "vocab_size must be at least 2";
  if (c.vocab_size > (1 << 30)) return "vocab_size must be at most 2^30 (got " + std::to_string(c.vocab_size) + ")";
  if (c.padded_vocab_size < c.vocab_size)
    return "padded_vocab_size (" + std::to_string(c.padded_vocab_size) + ") is smaller than vocab_size (" +
           std::to_string(c.vocab_size) + ")";
  // Sizes are products of the fields: the parameters, a layer's KV cache or activations over
  // the context, the logits of a full context. Each must stay far inside size_t, so that no
  // byte count wraps (2^40 elements: 4 TiB of f32, past any device).
  const double V = c.padded_vocab_size, T = c.max_seq_len, L = c.num_layers, C = c.channels;
  const struct {
    double elements;
    const char* what;
  } sizes[] = {{V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C, "parameters"},
               {L * T * 4 * C, "activations of a context (layers x max_seq_len x 4 channels)"},
               {T * V, "logits of a context (max_seq_len x padded vocabulary)"}};
  for (const auto& s : sizes)
    if (s.elements > 0x1p40) {
      char said[200];
      std::snprintf(said, sizeof said, "the geometry is too large: %.3g %s, past 2^40 elements", s.elements, s.what);
      return said;
    }
  return "";
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
