// Elementwise launches shared between ops (the unfused GELU epilogue of linear_forward).
#pragma once

#include "cuda/ops/context.h"

namespace nfn::cuda {

// out[0:n) = gelu(inp[0:n)); arguments already checked.
nfn_status launch_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype);

}  // namespace nfn::cuda
