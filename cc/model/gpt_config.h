// Dense GPT-2 geometry and the parameter layout of llm.c's checkpoints: 16 tensors, in the
// order wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
// fcprojw, fcprojb, lnfw, lnfb, contiguous.
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
  bool decay;     // AdamW weight decay applies (matrices and embeddings, not biases or norms)
};

std::array<ParamTensor, kNumParamTensors> param_layout(const GPTConfig& c);
size_t num_parameters(const GPTConfig& c);
// "" when the geometry is usable, else one line saying which field is wrong.
std::string validate_config(const GPTConfig& c);
// The vocabulary rounded up to a multiple of 128 (llm.c pads 50257 to 50304).
int pad_vocab(int vocab_size);

// Named geometries: gpt2-124m/-350m/-774m/-1558m (seq 1024), gpt3-125m/-350m/-760m/-1.3b/-2.7b
// (seq 2048) and the CPU demo "tiny". false when the name is unknown.
bool preset_config(const std::string& name, GPTConfig* out);
std::vector<std::string> preset_names();

}  // namespace nfn
