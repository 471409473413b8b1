// Linear layers through cuBLASLt. Row-major (N,IC) @ (OC,IC)^T is the column-major product
// W^T-as-stored times inp, so every GEMM here is a column-major call on the same memory.
#include <string>

#include "cuda/ops/activation.h"
#include "cuda/ops/column_reduce.cuh"
#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/side_stream.h"

using nfn::cuda::fail;
using nfn::cuda::GemmArgs;
using nfn::cuda::GemmEpilogue;

namespace {

// Counts a call that wanted epilogue `e` as fused or not (nfn_ctx_query's fused_epilogues).
void count_epilogue(nfn_ctx* ctx, GemmEpilogue e, bool fused) { ++ctx->epilogue_calls[static_cast<int>(e)][fused]; }

// A GEMM with a fused epilogue; *fused says whether it ran. cuBLASLt having no kernel for the
// epilogue at this shape or alignment (NFN_ERR_UNSUPPORTED once it is loaded) is not an
// error: the caller then runs the unfused form.
nfn_status try_fused(nfn_ctx* ctx, const char* op, const GemmArgs& g, bool* fused) {
  const nfn_status s = nfn::cuda::gemm(ctx, op, g);
  *fused = s == NFN_OK;
  const bool refused = s == NFN_ERR_UNSUPPORTED && ctx->cublaslt != nullptr;
  if (*fused || refused) count_epilogue(ctx, g.epilogue, *fused);
  return refused ? NFN_OK : s;
}

nfn_status check_shape(nfn_ctx* ctx, const char* op, int N, int IC, int OC) {
  if (N <= 0 || IC <= 0 || OC <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d IC=%d OC=%d must be positive", op, N, IC, OC);
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_linear_forward(nfn_ctx* ctx, void* out, void* aux, const void* inp, const void* weight,
                              const void* bias, const void* residual, int N, int IC, int OC,
                              nfn_epilogue epilogue, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "linear_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, IC, OC));
  if (out == nullptr || inp == nullptr || weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, inp or weight", op);
  if (epilogue != NFN_EPILOGUE_NONE && epilogue != NFN_EPILOGUE_GELU)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: unknown epilogue %d", op, static_cast<int>(epilogue));
  const bool gelu = epilogue == NFN_EPILOGUE_GELU;
  if (gelu != (aux != nullptr))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: aux must be given exactly when the epilogue is GELU", op);
  if (aux != nullptr && aux == out) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: aux must not alias out", op);
  if (gelu && residual != nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: a residual cannot follow the GELU epilogue", op);
  GemmArgs g = nfn::cuda::linear_output(out, inp, weight, N, IC, OC, dtype);
  g.bias = bias;
  if (!gelu) {  // the residual comes in as cuBLASLt's C: out = inp W^T + residual + bias
    g.epilogue = bias != nullptr ? GemmEpilogue::bias : GemmEpilogue::none;
    g.c = residual;
    g.beta = residual != nullptr ? 1.f : 0.f;
    return nfn::cuda::gemm(ctx, op, g);
  }
  // bf16: GELU fused into the GEMM (GELU_AUX_BIAS) where cuBLASLt allows it. f32 keeps our
  // own GELU kernel, the CPU's exact formula, so f32 results hold to 1e-5 whatever
  // approximation cuBLASLt uses.
  g.aux = aux;
  g.epilogue = bias != nullptr ? GemmEpilogue::gelu_aux_bias : GemmEpilogue::gelu_aux;
  if (dtype == NFN_BF16 && nfn::cuda::gelu_aux_ld_ok(g)) {
    bool fused = false;
    NFN_TRY(try_fused(ctx, op, g, &fused));
    if (fused) return NFN_OK;
  } else if (dtype == NFN_BF16) {
    count_epilogue(ctx, g.epilogue, false);  // cuBLASLt's divisible-by-8 rule
  }
  // f32, or no fused kernel for this shape or alignment: GEMM (+ bias) into aux, then GELU.
  g.d = aux;
  g.epilogue = bias != nullptr ? GemmEpilogue::bias : GemmEpilogue::none;
  g.aux = nullptr;
  NFN_TRY(nfn::cuda::gemm(ctx, op, g));
  return nfn::cuda::launch_gelu_forward(ctx, out, aux, static_cast<size_t>(N) * OC, dtype);
}

nfn_status nfn_linear_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias, void* dinp_colsum,
                               const void* dout, const void* inp, const void* weight, const void* gelu_pre, int N,
                               int IC, int OC, int accumulate_dinp, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "linear_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, IC, OC));
  if (dout == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout", op);
  if (dinp != nullptr && weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dinp needs weight", op);
  if (dweight != nullptr && inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dweight needs inp", op);
  if (gelu_pre != nullptr && (dinp == nullptr || accumulate_dinp != 0))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: gelu_pre needs dinp and no accumulate_dinp", op);
  if (dinp_colsum != nullptr && dinp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dinp_colsum needs dinp", op);
  // overlap=on: the weight and bias gradients on the side stream, beside the input gradient.
  bool forked = false;
  if (dinp != nullptr && (dweight != nullptr || dbias != nullptr)) NFN_TRY(nfn::cuda::side_fork(ctx, op, &forked));
  nfn::cuda::SideSection side(ctx, forked);  // joined on every return from here
  if (dinp != nullptr) {
    GemmArgs g = nfn::cuda::linear_input_grad(dinp, dout, weight, N, IC, OC, dtype);
    g.beta = accumulate_dinp ? 1.f : 0.f;
    // bf16 through a GELU: its derivative applied in the GEMM's epilogue (DGELU, the
    // pre-activation read as aux) where cuBLASLt allows it, so the GELU's output gradient is
    // never written and read back. f32 keeps gelu_backward's exact formula, as does a shape
    // with no fused kernel.
    bool fused = false, summed = false;  // summed: dinp_colsum done by the GEMM's epilogue
    if (gelu_pre != nullptr && dtype == NFN_BF16) {
      GemmArgs f = g;
      f.epilogue = GemmEpilogue::dgelu;
      f.aux = const_cast<void*>(gelu_pre);  // read, not written, under DGELU
      if (!nfn::cuda::gelu_aux_ld_ok(f)) {
        count_epilogue(ctx, f.epilogue, false);  // cuBLASLt's divisible-by-8 rule
      } else {
        // dinp_colsum: DGELU_BGRAD also writes dinp's column sums (to scratch, then added), so
        // nothing reads dinp again for them.
        if (dinp_colsum != nullptr) {
          void* sums = nullptr;
          NFN_TRY(nfn::cuda::scratch(ctx, nfn::cuda::dtype_size(dtype) * IC, &sums, op));
          GemmArgs b = f;
          b.epilogue = GemmEpilogue::dgelu_bgrad;
          b.bias = sums;
          NFN_TRY(try_fused(ctx, op, b, &fused));
          if (fused) NFN_TRY(nfn_residual_forward(ctx, dinp_colsum, dinp_colsum, sums, nullptr, 1, IC, dtype));
          summed = fused;
        }
        if (!fused) NFN_TRY(try_fused(ctx, op, f, &fused));
      }
    }
    if (!fused) {
      NFN_TRY(nfn::cuda::gemm(ctx, op, g));
      if (gelu_pre != nullptr)
        NFN_TRY(nfn_gelu_backward(ctx, dinp, gelu_pre, dinp, static_cast<size_t>(N) * IC, dtype));
    }
    if (dinp_colsum != nullptr && !summed)
      NFN_DISPATCH(dtype, E, NFN_TRY(nfn::cuda::add_column_sums(ctx, op, static_cast<E*>(dinp_colsum),
                                                                static_cast<const E*>(dinp), N, IC)));
  }
  side.enter();
  if (dweight != nullptr)
    NFN_TRY(nfn::cuda::gemm(ctx, op, nfn::cuda::linear_weight_grad(dweight, inp, dout, N, IC, OC, dtype)));
  // dbias += dout's column sums: our kernel, 16 bytes a load, in every dtype. (cuBLASLt's
  // BGRADB epilogue runs as a kernel of its own, slower than this one: column_reduce.cuh.)
  if (dbias != nullptr)
    NFN_DISPATCH(dtype, E, NFN_TRY(nfn::cuda::add_column_sums(ctx, op, static_cast<E*>(dbias),
                                                              static_cast<const E*>(dout), N, OC)));
  return side.join(op);
}

}  // extern "C"
