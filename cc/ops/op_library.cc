#include "cc/ops/op_library.h"

#include <dlfcn.h>

namespace nfn {
namespace {

template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn* slot, const std::string& path,
             std::string* error) {
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    *error = path + ": missing symbol " + symbol;
    return false;
  }
  *slot = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace

bool load_op_library(const std::string& path, OpLibrary* lib, std::string* error) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    *error = path + ": cannot load op library: " + (why ? why : "unknown dlopen error");
    return false;
  }
  // The version first: a library built for another ABI version is named as such, not by
  // the first entry point the versions differ in.
  nfn_op_table t{};
  bool ok = resolve(handle, "nfn_abi_version", &t.abi_version, path, error);
  if (ok && t.abi_version() != NFN_ABI_VERSION) {
    *error = path + ": op ABI version " + std::to_string(t.abi_version()) +
             ", this build expects " + std::to_string(NFN_ABI_VERSION);
    ok = false;
  }
  ok = ok && resolve(handle, "nfn_backend_name", &t.backend_name, path, error) &&
       resolve(handle, "nfn_ctx_create", &t.ctx_create, path, error) &&
       resolve(handle, "nfn_ctx_destroy", &t.ctx_destroy, path, error) &&
       resolve(handle, "nfn_ctx_last_error", &t.ctx_last_error, path, error) &&
       resolve(handle, "nfn_synchronize", &t.synchronize, path, error) &&
       resolve(handle, "nfn_ctx_configure", &t.ctx_configure, path, error) &&
       resolve(handle, "nfn_ctx_query", &t.ctx_query, path, error);
#define NFN_OP(name, category, dtypes, params) \
  ok = ok && resolve(handle, "nfn_" #name, &t.name, path, error);
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
  if (!ok) {
    dlclose(handle);
    return false;
  }
  lib->handle = handle;
  lib->path = path;
  lib->ops = t;
  return true;
}

void unload_op_library(OpLibrary* lib) {
  if (lib->handle != nullptr) dlclose(lib->handle);
  *lib = OpLibrary{};
}

}  // namespace nfn
