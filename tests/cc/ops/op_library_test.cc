// The run-time loader: loads the built CPU op library, and rejects bad paths in one line.
#include <cstdio>
#include <string>

#include "cc/ops/op_library.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::printf("usage: op_library_test PATH_TO_CPU_LIB\n");
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
  lib.ops.ctx_destroy(ctx);
  nfn::unload_op_library(&lib);

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
