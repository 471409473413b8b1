// What every op example shares: it opens the op library named on its command line with the
// project's loader (cc/ops/op_library.h: dlopen, the ABI version check, every symbol into an
// nfn_op_table), makes a context, and moves small arrays between the host and the library's
// memory. A failed call prints one line naming it and the library's reason, and exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "cc/ops/op_library.h"

namespace example {

// The op library loaded and a context made on it: what every example calls ops through.
struct Library {
  nfn::OpLibrary lib;
  nfn_ctx* ctx = nullptr;
  const nfn_op_table& ops() const { return lib.ops; }
};

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  std::exit(1);
}

inline void check(const Library& s, nfn_status status, const char* what) {
  if (status != NFN_OK) fail(std::string(what) + ": " + s.lib.ops.ctx_last_error(s.ctx));
}

// argv[1]: the op library (libnfn_native_train_cpu_ops.so, or the CUDA library).
inline Library open(int argc, char** argv) {
  if (argc != 2) fail(std::string("usage: ") + argv[0] + " PATH/TO/OP_LIBRARY.so");
  Library s;
  std::string error;
  if (!nfn::load_op_library(argv[1], &s.lib, &error)) fail(error);
  if (s.lib.ops.ctx_create(0, &s.ctx) != NFN_OK) fail(std::string(argv[1]) + ": " + s.lib.ops.ctx_last_error(nullptr));
  const char* device = s.lib.ops.ctx_query(s.ctx, "device");
  std::printf("# %s library, device \"%s\"\n", s.lib.ops.backend_name(), device ? device : "");
  return s;
}

inline void close(Library* s) {
  s->lib.ops.ctx_destroy(s->ctx);
  nfn::unload_op_library(&s->lib);
}

// The library's memory holding `host` (copied up; the copy is done when this returns).
template <typename T>
T* upload(const Library& s, const std::vector<T>& host) {
  void* p = nullptr;
  check(s, s.ops().alloc(s.ctx, host.size() * sizeof(T), &p), "alloc");
  check(s, s.ops().copy(s.ctx, p, host.data(), host.size() * sizeof(T), NFN_HOST_TO_DEVICE), "copy");
  check(s, s.ops().synchronize(s.ctx), "synchronize");
  return static_cast<T*>(p);
}

// n elements of the library's memory, after every op issued so far.
template <typename T = float>
std::vector<T> download(const Library& s, const void* device, size_t n) {
  std::vector<T> host(n);
  check(s, s.ops().copy(s.ctx, host.data(), device, n * sizeof(T), NFN_DEVICE_TO_HOST), "copy");
  check(s, s.ops().synchronize(s.ctx), "synchronize");
  return host;
}

// Frees library memory from upload or alloc.
inline void free_all(const Library& s, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) check(s, s.ops().free(s.ctx, const_cast<void*>(p)), "free");
}

// "name: v0 v1 ...", floats with 9 significant digits (enough to read back the same float).
inline void print(const char* name, const std::vector<float>& values) {
  std::printf("%s:", name);
  for (float v : values) std::printf(" %.9g", v);
  std::printf("\n");
}

inline void print(const char* name, const std::vector<int32_t>& values) {
  std::printf("%s:", name);
  for (int32_t v : values) std::printf(" %d", v);
  std::printf("\n");
}

// n values spread over [-1, 1): the same inputs on every run and library.
inline std::vector<float> values(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i * 37 + seed * 101) % 200) / 100.0 - 1.0);
  return v;
}

}  // namespace example
