// Prints the trainer's flag table as JSON (what nfn_gpt_native_train --describe-flags prints),
// for the build to cache beside the Python package: `nfn train --help` reads it without
// starting a process.
#include <cstdio>

#include "cc/train/train_flags.h"

int main() {
  std::printf("%s\n", nfn::train_flags("nfn_gpt_native_train", "").describe().dump(1).c_str());
  return 0;
}
