// Chooses and loads the op library a run uses: --tile-ops-lib PATH, or --backend
// cpu|cuda|auto resolved to a library found beside the binary, in its Bazel runfiles, or in
// $NFN_TILE_OPS_DIR. auto means CUDA when its library loads and a device answers, else CPU.
#pragma once

#include <string>

#include "cc/ops/op_library.h"

namespace nfn {

struct Backend;
void close_backend(Backend* b);

// Owns the loaded library and its context; declare it before anything that calls its ops,
// so that it is destroyed after them.
struct Backend {
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ~Backend() { close_backend(this); }

  OpLibrary lib;
  nfn_ctx* ctx = nullptr;
  std::string name;  // "cpu" or "cuda" (from the library itself)
  std::string path;
  std::string auto_note;  // why auto chose what it chose
};

constexpr const char* kCpuOpsLib = "libnfn_native_train_cpu_ops.so";
constexpr const char* kCudaOpsLib = "libnfn_native_train_tile_ops.so";

// Where the library for `backend` would be loaded from; "" when not found.
std::string find_op_library(const std::string& backend);
bool open_backend(const std::string& backend, const std::string& lib_path, Backend* out, std::string* error);

}  // namespace nfn
