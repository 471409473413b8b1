// nfn_llama_native_train: the llama architecture (cc/model/decoder.h) with AdamW.
#include "cc/bin/trainer_main.h"

int main(int argc, char** argv) {
  return nfn::trainer_main("nfn_llama_native_train",
                           "Train a llama-architecture model (RMSNorm, rotary, grouped-query attention, SwiGLU)\n"
                           "with AdamW on token shards with a native op library, writing safetensors\n"
                           "checkpoints named as Hugging Face names llama's tensors, a manifest and a report.\n"
                           "With no size it trains the small CPU demo model.",
                           {"llama"}, argc, argv);
}
