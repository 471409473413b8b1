// nfn's artifacts directory, as its Python side finds it: $NFN_ARTIFACTS_DIR, else the older
// $NEURALFN_ARTIFACTS_DIR, else ~/NeuralFn/artifacts (a blank variable is unset). Trainers write
// there by default and find checkpoints named there (`--init-from smollm2`).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace nfn {

inline std::string artifacts_dir() {
  for (const char* name : {"NFN_ARTIFACTS_DIR", "NEURALFN_ARTIFACTS_DIR"}) {
    const char* env = std::getenv(name);
    if (env != nullptr && env[std::strspn(env, " \t\n")] != '\0') return env;
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/NeuralFn/artifacts";
}

}  // namespace nfn
