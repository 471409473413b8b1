// nfn_gpt_native_train: the dense GPT trainer (model families gpt, gpt2 and gpt3).
#include <cstdio>
#include <new>

#include "cc/train/checkpoint_query.h"
#include "cc/train/train_flags.h"
#include "cc/train/trainer.h"

int main(int argc, char** argv) {
  // What `nfn` asks of checkpoints (cc/train/checkpoint_query.h) instead of training.
  if (nfn::is_checkpoint_query(argc, argv)) return nfn::run_checkpoint_query("nfn_gpt_native_train", argc, argv);
  nfn::Flags flags = nfn::train_flags(
      "nfn_gpt_native_train",
      "Train a dense GPT-2/GPT-3-style model on llm.c token shards with a native op library\n"
      "(CPU or CUDA), writing llm.c-format checkpoints, a manifest and a JSON report.\n"
      "With no geometry or template it trains the small CPU demo model.");
  std::string error;
  if (!flags.parse(argc, argv, &error)) {
    std::fprintf(stderr, "nfn_gpt_native_train: error: %s\n", error.c_str());
    return 2;
  }
  if (flags.has("help")) {
    std::printf("%s", flags.help().c_str());
    return 0;
  }
  if (flags.has("describe-flags")) {
    std::printf("%s\n", flags.describe().dump(1).c_str());
    return 0;
  }
  nfn::TrainConfig config;
  if (!nfn::resolve_train_config(flags, &config, &error)) {
    std::fprintf(stderr, "nfn_gpt_native_train: error: %s\n", error.c_str());
    return 2;
  }
  try {
    return nfn::run_training(config);
  } catch (const std::bad_alloc&) {
    // A host buffer (the initial parameters, a checkpoint's copies, a data reader's) did not
    // fit; a checkpoint cut short has no DONE marker, so no later run trusts it.
    std::fprintf(stderr,
                 "nfn_gpt_native_train: error: out of host memory (std::bad_alloc): a smaller model or "
                 "--batch-size needs less\n");
    return 1;
  }
}
