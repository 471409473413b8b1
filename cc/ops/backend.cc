#include "cc/ops/backend.h"

#include <cstdlib>
#include <vector>

#include "cc/util/files.h"

namespace nfn {

namespace {

// Candidate directories for op libraries, most specific first.
std::vector<std::string> library_dirs(const std::string& backend) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("NFN_TILE_OPS_DIR")) dirs.push_back(env);
  for (const std::string& d : sibling_and_runfiles_dirs(backend == "cuda" ? "cuda/ops" : "cc/ops"))
    dirs.push_back(d);
  return dirs;
}

}  // namespace

std::string find_op_library(const std::string& backend) {
  const char* lib = backend == "cuda" ? kCudaOpsLib : kCpuOpsLib;
  for (const std::string& dir : library_dirs(backend)) {
    std::string p = join_path(dir, lib);
    if (path_exists(p)) return p;
  }
  return "";
}

namespace {

bool open_library(const std::string& path, Backend* out, std::string* error) {
  if (!load_op_library(path, &out->lib, error)) return false;
  if (out->lib.ops.ctx_create(0, &out->ctx) != NFN_OK) {
    *error = path + ": " + out->lib.ops.ctx_last_error(nullptr);
    unload_op_library(&out->lib);
    return false;
  }
  out->name = out->lib.ops.backend_name();
  out->path = path;
  return true;
}

}  // namespace

bool open_backend(const std::string& backend, const std::string& lib_path, Backend* out, std::string* error) {
  if (!lib_path.empty()) return open_library(lib_path, out, error);
  if (backend == "cpu" || backend == "cuda") {
    std::string path = find_op_library(backend);
    if (path.empty()) {
      *error = std::string("no ") + (backend == "cuda" ? kCudaOpsLib : kCpuOpsLib) +
               " beside the binary, in its runfiles or in $NFN_TILE_OPS_DIR (pass --tile-ops-lib PATH)";
      return false;
    }
    return open_library(path, out, error);
  }
  if (backend != "auto") {
    *error = "--backend " + backend + ": expected cpu, cuda or auto";
    return false;
  }
  std::string cuda = find_op_library("cuda"), why;
  if (cuda.empty()) {
    out->auto_note = "auto: no CUDA op library built";
  } else if (open_library(cuda, out, &why)) {
    const char* device = out->lib.ops.ctx_query(out->ctx, "device");
    out->auto_note = std::string("auto: ") + kCudaOpsLib + " loads and makes a context on device 0" +
                     (device != nullptr && *device ? std::string(" (") + device + ")" : "");
    return true;
  } else {
    out->auto_note = "auto: " + why;
  }
  std::string note = out->auto_note;
  if (!open_backend("cpu", "", out, error)) {
    *error = note + "; and " + *error;
    return false;
  }
  out->auto_note = note;
  return true;
}

bool cpu_has_bf16_units() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

void close_backend(Backend* b) {
  if (b->ctx != nullptr) b->lib.ops.ctx_destroy(b->ctx);
  b->ctx = nullptr;
  unload_op_library(&b->lib);
}

}  // namespace nfn
