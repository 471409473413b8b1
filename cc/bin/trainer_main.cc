#include "cc/bin/trainer_main.h"

#include <cstdio>
#include <new>
#include <vector>

#include "cc/train/checkpoint_query.h"
#include "cc/train/train_flags.h"
#include "cc/train/trainer.h"

namespace nfn {

int trainer_main(const char* name, const char* about, std::initializer_list<const char*> families, int argc,
                 char** argv) {
  // What `nfn` asks of checkpoints (cc/train/checkpoint_query.h) instead of training.
  if (is_checkpoint_query(argc, argv)) return run_checkpoint_query(name, argc, argv);
  Flags flags = train_flags(name, about);
  std::string error;
  if (!flags.parse(argc, argv, &error)) {
    std::fprintf(stderr, "%s: error: %s\n", name, error.c_str());
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
  if (!flags.has("model-family") && !flags.has("graph-file")) {
    // This binary's own family, as if named.
    std::vector<char*> args(argv, argv + argc);
    std::string spelled = std::string("--model-family=") + *families.begin();
    args.push_back(spelled.data());
    if (!flags.parse(static_cast<int>(args.size()), args.data(), &error)) {
      std::fprintf(stderr, "%s: error: %s\n", name, error.c_str());
      return 2;
    }
  }
  const std::string family = flags.get("model-family");
  bool ours = false;
  for (const char* f : families) ours |= family == f;
  if (!ours && !flags.has("graph-file")) {
    std::fprintf(stderr, "%s: error: --model-family %s: this trainer takes %s (nfn_native_train runs each family's)\n",
                 name, family.c_str(), *families.begin());
    return 2;
  }
  TrainConfig config;
  if (!resolve_train_config(flags, &config, &error)) {
    std::fprintf(stderr, "%s: error: %s\n", name, error.c_str());
    return 2;
  }
  try {
    return run_training(config);
  } catch (const std::bad_alloc&) {
    // A host buffer (the initial parameters, a checkpoint's copies, a data reader's) did not
    // fit; a checkpoint cut short has no DONE marker, so no later run trusts it.
    std::fprintf(stderr, "%s: error: out of host memory (std::bad_alloc): a smaller model or --batch-size needs less\n",
                 name);
    return 1;
  }
}

}  // namespace nfn
