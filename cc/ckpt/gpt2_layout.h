// The geometry and parameter layout of llm.c's GPT-2 checkpoints (model_%08d.bin): the six
// geometry fields of the header, and 16 tensors contiguous in the order wte, wpe, ln1w, ln1b,
// qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb. Facts of
// the format: cc/ckpt reads and writes files by them, cc/model builds its GPT on them.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace nfn {

struct GPTConfig {
  int max_seq_len = 1024;
  int vocab_size = 50257;
  int padded_vocab_size = 50304;
  int num_layers = 12;
  int num_heads = 12;
  int channels = 768;
};

constexpr int kNumParamTensors = 16;
extern const std::array<const char*, kNumParamTensors> kParamNames;

struct ParamTensor {
  const char* name;
  std::vector<size_t> shape;
  size_t count;   // elements
  size_t offset;  // elements from the start of the parameter block
};

std::array<ParamTensor, kNumParamTensors> param_layout(const GPTConfig& c);
size_t num_parameters(const GPTConfig& c);
// "" when the geometry is usable, else one line saying which field is wrong.
std::string validate_config(const GPTConfig& c);

}  // namespace nfn
