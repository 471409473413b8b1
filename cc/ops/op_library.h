// Loads an op library (CPU or CUDA) at run time and fills an nfn_op_table from it.
#pragma once

#include <string>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

struct OpLibrary {
  void* handle = nullptr;
  std::string path;
  nfn_op_table ops{};
};

// Opens `path` with dlopen, checks its ABI version, then resolves every ABI symbol. Returns
// false with a one-line reason in *error (naming the file and the ABI mismatch or the
// missing symbol).
bool load_op_library(const std::string& path, OpLibrary* lib, std::string* error);
void unload_op_library(OpLibrary* lib);

}  // namespace nfn
