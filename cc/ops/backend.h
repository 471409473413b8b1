// Chooses and loads the op library a run uses: --tile-ops-lib PATH, or --backend
// cpu|cuda|auto resolved to a library found beside the binary, in its Bazel runfiles, or in
// $NFN_TILE_OPS_DIR. auto means CUDA when its library loads and a device answers, else CPU.
// The trainers, the Python bridge and nfn_op_probe (`nfn kernels doctor`) all decide here.
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
// Opens the library and makes a context on device 0. false with a one-line reason naming the
// file (for auto that failed: why not CUDA, then why not CPU).
bool open_backend(const std::string& backend, const std::string& lib_path, Backend* out, std::string* error);

// Whether the CPU has bf16 dot-product units (AVX512-BF16 or AMX-BF16): where it has, bf16
// GEMMs are the CPU trainer's default (1.64x the f32 step on a 2-core Zen 4, 2026-12-01);
// AVX-512 without them would run oneDNN's bf16 emulated, slower than f32.
bool cpu_has_bf16_units();

}  // namespace nfn
