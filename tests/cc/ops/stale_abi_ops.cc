// An op library built for another ABI version: every entry point of this build's table,
// reporting version NFN_ABI_VERSION + 1. Loaders must refuse it by its version
// (op_library_test, and `nfn kernels doctor` through nfn_op_probe), whatever else it exports.
#include "cc/ops/nfn_tile_ops.h"

extern "C" {

int nfn_abi_version(void) { return NFN_ABI_VERSION + 1; }
const char* nfn_backend_name(void) { return "cpu"; }
nfn_status nfn_ctx_create(int, nfn_ctx**) { return NFN_ERR_UNSUPPORTED; }
void nfn_ctx_destroy(nfn_ctx*) {}
const char* nfn_ctx_last_error(const nfn_ctx*) { return "a stand-in for a library of another ABI version"; }
nfn_status nfn_synchronize(nfn_ctx*) { return NFN_ERR_UNSUPPORTED; }
nfn_status nfn_ctx_configure(nfn_ctx*, const char*, const char*) { return NFN_ERR_UNSUPPORTED; }
const char* nfn_ctx_query(const nfn_ctx*, const char*) { return nullptr; }

#define NFN_OP(name, category, dtypes, params) \
  nfn_status nfn_##name params { return NFN_ERR_UNSUPPORTED; }
#include "cc/ops/nfn_ops.def"
#undef NFN_OP

}  // extern "C"
