// The run-time loader: loads the built CPU op library, and rejects bad paths and a library
// of another ABI version in one line.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "cc/ops/op_library.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::printf("usage: op_library_test PATH_TO_CPU_LIB PATH_TO_STALE_ABI_LIB\n");
    return 2;
  }
  int failures = 0;
  nfn::OpLibrary lib;
  std::string error;
  if (!nfn::load_op_library(argv[1], &lib, &error)) {
    std::printf("FAIL: %s\n", error.c_str());
    return 1;
  }
  if (std::string(lib.ops.backend_name()) != "cpu") ++failures, std::printf("FAIL: backend name\n");
  nfn_ctx* ctx = nullptr;
  float buf[4] = {0, 0, 0, 0};
  if (lib.ops.ctx_create(0, &ctx) != NFN_OK || lib.ops.fill(ctx, buf, NFN_F32, 2.f, 4) != NFN_OK ||
      buf[3] != 2.f) {
    ++failures;
    std::printf("FAIL: fill through the table\n");
  }
  // The query entry point: the device is the CPU's model as /proc/cpuinfo names it; a key
  // the CPU library does not know is NULL.
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; model.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0 || line.find(':') == std::string::npos) continue;
    model = line.substr(line.find(':') + 1);
    model.erase(0, model.find_first_not_of(" \t"));
    model.erase(model.find_last_not_of(" \t") + 1);
  }
  const char* device = lib.ops.ctx_query(ctx, "device");
  if (device == nullptr || device != model) {
    ++failures;
    std::printf("FAIL: ctx_query device is '%s', /proc/cpuinfo says '%s'\n", device ? device : "(null)", model.c_str());
  }
  if (lib.ops.ctx_query(ctx, "attention") != nullptr || lib.ops.ctx_query(nullptr, "device") != nullptr) {
    ++failures;
    std::printf("FAIL: ctx_query answers a key the CPU library does not know, or without a context\n");
  }
  lib.ops.ctx_destroy(ctx);
  nfn::unload_op_library(&lib);

  // A library of another ABI version is named by its version, whatever it exports.
  nfn::OpLibrary stale;
  const std::string want = std::string(argv[2]) + ": op ABI version " + std::to_string(NFN_ABI_VERSION + 1) +
                           ", this build expects " + std::to_string(NFN_ABI_VERSION);
  if (nfn::load_op_library(argv[2], &stale, &error) || error != want) {
    ++failures;
    std::printf("FAIL: another ABI version's error was: %s\n", error.c_str());
  }

  nfn::OpLibrary missing;
  if (nfn::load_op_library("/nonexistent/libops.so", &missing, &error) ||
      error.find("/nonexistent/libops.so: cannot load op library") != 0) {
    ++failures;
    std::printf("FAIL: missing library error was: %s\n", error.c_str());
  }
  // A real shared object that is not an op library: rejected naming the missing symbol.
  nfn::OpLibrary wrong;
  if (nfn::load_op_library("libm.so.6", &wrong, &error) ||
      error.find("missing symbol nfn_abi_version") == std::string::npos) {
    ++failures;
    std::printf("FAIL: non-op library error was: %s\n", error.c_str());
  }
  std::printf(failures ? "%d failures\n" : "PASS\n", failures);
  return failures ? 1 : 0;
}
