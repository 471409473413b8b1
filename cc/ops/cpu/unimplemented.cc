// Weak fallbacks for every op of the ABI: an op this library does not implement yet still
// resolves (so the library loads) and fails with NFN_ERR_UNSUPPORTED and a reason. Real
// implementations in the other files override these at link time. Each unimplemented op
// must also be listed in support.def, which is what `nfn kernels list` reports.
#include "cc/ops/cpu/context.h"

#define NFN_OP(name, category, dtypes, params)                                               \
  extern "C" __attribute__((weak)) nfn_status nfn_##name params {                           \
    return nfn::cpu::fail(ctx, NFN_ERR_UNSUPPORTED,                                        \
                           #name " is not implemented by the CPU op library yet");         \
  }
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
