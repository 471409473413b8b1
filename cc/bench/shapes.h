// The model geometries the op benchmarks time ops at: each op is called at the shapes one
// training micro-step of that GPT calls it with.
#pragma once

#include <string>

namespace nfn::bench {

struct Shape {
  std::string name;
  int L, NH, C, T, B;
  int vocab;        // the tokenizer's vocabulary (the softmax's columns)
  int Vp;           // wte's rows: the vocabulary padded for the GEMMs
  int calibration;  // the side of bench_ops' square calibration GEMM
};

// tiny: one layer, a check of the tools themselves (on the CUDA emulator, say); small: the CPU
// trainer benchmark's (4 layers, 4 heads, 256 channels, seq 256, micro-batch 8, vocab 8192);
// demo: `nfn train`'s demo (4 layers, 4 heads, 128 channels, seq 128, micro-batch 16, vocab
// 1024); gpt2: GPT-2 124M at seq 1024, micro-batch 16 (the GPU benchmark's). false for
// another name.
bool shape_named(const std::string& name, Shape* out);

// "tiny|small|demo|gpt2", for usage lines.
const char* shape_names();

}  // namespace nfn::bench
