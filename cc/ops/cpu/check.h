// Argument checks shared by the CPU ops: each failure is one line naming the op and the problem.
#pragma once

#include "cc/ops/cpu/context.h"

// Inside an op with `ctx` in scope: returns NFN_ERR_INVALID_ARGUMENT with the message when
// `cond` is false.
#define NFN_REQUIRE(cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) return ::nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

// At the start of every op: a null context is refused before anything reads it (there is
// nowhere to put a message), as the CUDA library does.
#define NFN_CHECK_CTX(ctx)                                 \
  do {                                                     \
    if ((ctx) == nullptr) return NFN_ERR_INVALID_ARGUMENT; \
  } while (0)

// Propagates a non-OK status.
#define NFN_RETURN_IF_ERROR(expr)           \
  do {                                      \
    nfn_status nfn_status_ = (expr);        \
    if (nfn_status_ != NFN_OK) return nfn_status_; \
  } while (0)

namespace nfn::cpu {

// Compute ops keep activations in f32 on the CPU: f32 is OK, bf16 is NFN_ERR_UNSUPPORTED
// (bf16 compute is the GEMM mode "matmul=bf16"), anything else is an invalid argument.
inline nfn_status check_compute_dtype(nfn_ctx* ctx, const char* op, nfn_dtype dtype) {
  if (dtype == NFN_F32) return NFN_OK;
  if (dtype == NFN_BF16)
    return fail(ctx, NFN_ERR_UNSUPPORTED,
                "%s: bf16 storage is not supported on the CPU (activations stay f32; "
                "configure matmul=bf16 for bf16 GEMMs)", op);
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, static_cast<int>(dtype));
}

// f32 or bf16 storage, for the ops that implement both.
inline nfn_status check_storage_dtype(nfn_ctx* ctx, const char* op, nfn_dtype dtype) {
  if (dtype == NFN_F32 || dtype == NFN_BF16) return NFN_OK;
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, static_cast<int>(dtype));
}

}  // namespace nfn::cpu
