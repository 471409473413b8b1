#include "cc/ckpt/gpt2_layout.h"

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
    out[i] = ParamTensor{kParamNames[i], shapes[i], count, offset};
    offset += count;
  }
  return out;
}

size_t num_parameters(const GPTConfig& c) {
  auto layout = param_layout(c);
  return layout.back().offset + layout.back().count;
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

}  // namespace nfn
