// Dense GPT-2 configurations: the geometry and parameter layout are the llm.c checkpoint's
// (cc/ckpt/gpt2_layout.h); this adds what training and the model choose on top of them.
#pragma once

#include <string>
#include <vector>

#include "cc/ckpt/gpt2_layout.h"

namespace nfn {

// The vocabulary rounded up to a multiple of 128 (llm.c pads 50257 to 50304).
int pad_vocab(int vocab_size);

// Whether AdamW's weight decay applies to tensor `tensor` of param_layout: the matrices and
// embeddings, not the biases or norm weights.
bool param_decays(int tensor);

// Named geometries: gpt2-124m/-350m/-774m/-1558m (seq 1024), gpt3-125m/-350m/-760m/-1.3b/-2.7b
// (seq 2048) and the CPU demo "tiny". false when the name is unknown.
bool preset_config(const std::string& name, GPTConfig* out);
std::vector<std::string> preset_names();

}  // namespace nfn
