// An nfn_op_table filled from the op library linked into this binary (no dlopen): for
// programs and modules that link one backend statically, such as the Python bridge.
#pragma once

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

inline nfn_op_table linked_op_table() {
  nfn_op_table t{};
  t.abi_version = &nfn_abi_version;
  t.backend_name = &nfn_backend_name;
  t.ctx_create = &nfn_ctx_create;
  t.ctx_destroy = &nfn_ctx_destroy;
  t.ctx_last_error = &nfn_ctx_last_error;
  t.synchronize = &nfn_synchronize;
  t.ctx_configure = &nfn_ctx_configure;
  t.ctx_query = &nfn_ctx_query;
#define NFN_OP(name, category, dtypes, params) t.name = &nfn_##name;
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
  return t;
}

}  // namespace nfn
