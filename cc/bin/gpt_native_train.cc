// nfn_gpt_native_train: the dense GPT trainer (model families gpt, gpt2 and gpt3).
#include "cc/bin/trainer_main.h"

int main(int argc, char** argv) {
  return nfn::trainer_main("nfn_gpt_native_train",
                           "Train a dense GPT-2/GPT-3-style model on llm.c token shards with a native op library\n"
                           "(CPU or CUDA), writing llm.c-format checkpoints, a manifest and a JSON report.\n"
                           "With no geometry or template it trains the small CPU demo model.",
                           {"gpt", "gpt2", "gpt3", "nanogpt"}, argc, argv);
}
