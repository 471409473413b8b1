// GEMMs through cuBLASLt, which is opened at run time (libcublasLt.so.13) so that the op
// library builds and loads without it; a GEMM op fails with the reason when it is missing.
#pragma once

#include "cuda/ops/context.h"

namespace nfn::cuda {

enum class GemmEpilogue { none, bias, gelu_aux, gelu_aux_bias, dgelu, dgelu_bgrad };

// Column-major D (m,n) = op(A) op(B) + beta * C, C = D unless c is set (then c, laid out as D),
// A (m,k) after op, B (k,n) after op, with
// an optional epilogue: + bias (m), then GELU with the pre-activation stored in aux (ld m);
// or (dgelu) D *= GELU'(aux), aux (ld m) the pre-activation a gelu_aux GEMM stored; or
// (dgelu_bgrad) that, and D's row sums written to bias (m, D's dtype: the gradient of a bias
// added into aux).
// A and B are `ab` (f32 or bf16), D is `d` (f32 or bf16). f32 inputs use plain f32 math.
// cuBLASLt wants the aux leading dimension divisible by 8 (gelu_aux_ld_ok); a GELU epilogue
// without it, or a shape cuBLASLt has no kernel for, returns NFN_ERR_UNSUPPORTED.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* d = nullptr;
  int ldd = 0;
  const void* c = nullptr;  // C when it is not D (D's dtype and leading dimension)
  nfn_dtype ab = NFN_F32, d_dtype = NFN_F32;
  float beta = 0.f;
  GemmEpilogue epilogue = GemmEpilogue::none;
  const void* bias = nullptr;
  void* aux = nullptr;
};

nfn_status gemm(nfn_ctx* ctx, const char* op, const GemmArgs& args);

// The three products of a row-major linear layer y (N,OC) = x (N,IC) @ w (OC,IC)^T, each the
// column-major GEMM on the same memory (A, B and D in `dtype`; no epilogue). The linear ops
// and the LM head (x the final norm's output, w the token embedding) both use them.
// y = x w^T: D (OC,N col-major) = w^T (OC,IC) @ x (IC,N).
inline GemmArgs linear_output(void* y, const void* x, const void* w, int N, int IC, int OC, nfn_dtype dtype) {
  GemmArgs g;
  g.trans_a = true;
  g.m = OC, g.n = N, g.k = IC;
  g.a = w, g.lda = IC;
  g.b = x, g.ldb = IC;
  g.d = y, g.ldd = OC;
  g.ab = g.d_dtype = dtype;
  return g;
}

// dx = dy w: D (IC,N col-major) = w (IC,OC) @ dy (OC,N); beta 0 (set 1 to accumulate).
inline GemmArgs linear_input_grad(void* dx, const void* dy, const void* w, int N, int IC, int OC, nfn_dtype dtype) {
  GemmArgs g;
  g.m = IC, g.n = N, g.k = OC;
  g.a = w, g.lda = IC;
  g.b = dy, g.ldb = OC;
  g.d = dx, g.ldd = IC;
  g.ab = g.d_dtype = dtype;
  return g;
}

// dw += x^T dy: D (IC,OC col-major) += x (IC,N) @ dy^T (N,OC); beta 1.
inline GemmArgs linear_weight_grad(void* dw, const void* x, const void* dy, int N, int IC, int OC, nfn_dtype dtype) {
  GemmArgs g;
  g.trans_b = true;
  g.m = IC, g.n = OC, g.k = N;
  g.a = x, g.lda = IC;
  g.b = dy, g.ldb = OC;
  g.d = dw, g.ldd = IC;
  g.ab = g.d_dtype = dtype;
  g.beta = 1.f;
  return g;
}

inline bool has_gelu_aux(const GemmArgs& g) {
  return g.epilogue == GemmEpilogue::gelu_aux || g.epilogue == GemmEpilogue::gelu_aux_bias ||
         g.epilogue == GemmEpilogue::dgelu || g.epilogue == GemmEpilogue::dgelu_bgrad;
}

// cuBLASLt's rule for the GELU input matrix: leading dimension (here m) divisible by 8.
inline bool gelu_aux_ld_ok(const GemmArgs& g) { return g.m % 8 == 0; }

// The rule as gemm() applies it (cublaslt.cc, and the emulator's gemm.cc): NFN_ERR_UNSUPPORTED
// with the reason for a GELU epilogue that breaks it, else NFN_OK.
inline nfn_status check_gelu_aux(nfn_ctx* ctx, const char* op, const GemmArgs& g) {
  if (!has_gelu_aux(g) || gelu_aux_ld_ok(g)) return NFN_OK;
  return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: cuBLASLt's GELU epilogue needs m=%d divisible by 8", op, g.m);
}

// The first GEMM on a context creates cuBLASLt's handle and workspace (ctx->cublaslt), which
// a graph recording cannot hold (cublaslt.cc, and the emulator's gemm.cc): NFN_ERR_INVALID_ARGUMENT
// with the reason then, else NFN_OK.
inline nfn_status check_gemm_setup(nfn_ctx* ctx, const char* op) {
  if (ctx->cublaslt != nullptr || !ctx->recording) return NFN_OK;
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
              "%s: the first GEMM on a context sets up cuBLASLt (handle, workspace), which a graph "
              "recording cannot hold; issue the same ops once before recording them", op);
}

// Builds (and frees) cuBLASLt's descriptors for `g` as gemm() would, without a handle, a GPU or
// a product: NFN_OK, or the call cuBLASLt refused and why. For tests.
nfn_status check_gemm_descriptors(nfn_ctx* ctx, const char* op, const GemmArgs& g);

// The bytes of cuBLASLt workspace a GEMM is given (ctx->gemm_workspace; side_stream.cu
// gives its stream as much).
size_t gemm_workspace_bytes();

// Frees the context's cuBLASLt handle and workspace.
void gemm_release(nfn_ctx* ctx);

}  // namespace nfn::cuda
