// nfn::cuda::gemm for the CUDA emulator: cuBLASLt's documented semantics on the host, in
// place of cublaslt.cc. Column-major D (m,n) = op(A) op(B) + beta C (C = D, or g.c), then
// the epilogue (+ bias per row of D; GELU_AUX: aux = the pre-activation, D = GELU(aux), with
// cuBLASLt's tanh GELU; DGELU: D *= GELU'(aux); DGELU_BGRAD: that, and bias = D's row sums,
// summed in f32 before D's rounding), f32 accumulation, one rounding to the output dtype.
// Each matrix's extent is checked against its device allocation, which catches a wrong
// leading dimension.
#include <cmath>
#include <vector>

#include <cuda_bf16.h>

#include "cuda/ops/cublaslt.h"

namespace nfn::cuda {

namespace {

float load(const void* p, nfn_dtype dtype, size_t i) {
  return dtype == NFN_BF16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                           : static_cast<const float*>(p)[i];
}

void store(void* p, nfn_dtype dtype, size_t i, float v) {
  if (dtype == NFN_BF16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// Bytes spanned by a column-major (rows, cols) matrix with leading dimension ld.
size_t extent(int rows, int cols, int ld, nfn_dtype dtype) {
  return (static_cast<size_t>(cols - 1) * ld + rows) * dtype_size(dtype);
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

float gelu_tanh_grad(float x) {
  const float k = 0.7978845608028654f;
  const float t = std::tanh(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x * x);
}

// D = op(A) op(B) + beta C and the epilogue, on the host (the checks are gemm()'s).
void product(const GemmArgs& g, const void* c, bool with_bias, bool with_aux) {
  // op(A) as m rows of k, op(B) as n rows of k, in f32: every dot product is contiguous.
  const size_t K = static_cast<size_t>(g.k);
  std::vector<float> a(static_cast<size_t>(g.m) * K), b(static_cast<size_t>(g.n) * K);
  for (int i = 0; i < g.m; ++i)
    for (size_t p = 0; p < K; ++p)
      a[i * K + p] = load(g.a, g.ab, g.trans_a ? i * static_cast<size_t>(g.lda) + p : p * g.lda + i);
  for (int j = 0; j < g.n; ++j)
    for (size_t p = 0; p < K; ++p)
      b[j * K + p] = load(g.b, g.ab, g.trans_b ? p * static_cast<size_t>(g.ldb) + j : j * static_cast<size_t>(g.ldb) + p);
  std::vector<float> row_sums(g.epilogue == GemmEpilogue::dgelu_bgrad ? g.m : 0, 0.f);
  for (int j = 0; j < g.n; ++j) {
    const float* bj = &b[j * K];
    for (int i = 0; i < g.m; ++i) {
      const float* ai = &a[i * K];
      float acc = 0.f;
      for (size_t p = 0; p < K; ++p) acc += ai[p] * bj[p];
      const size_t at = static_cast<size_t>(j) * g.ldd + i;
      if (g.beta != 0.f) acc += g.beta * load(c, g.d_dtype, at);
      if (with_bias) acc += load(g.bias, g.d_dtype, i);
      if (g.epilogue == GemmEpilogue::dgelu || g.epilogue == GemmEpilogue::dgelu_bgrad) {
        acc *= gelu_tanh_grad(load(g.aux, g.d_dtype, static_cast<size_t>(j) * g.m + i));
        if (!row_sums.empty()) row_sums[i] += acc;
      } else if (with_aux) {
        store(g.aux, g.d_dtype, static_cast<size_t>(j) * g.m + i, acc);
        acc = gelu_tanh(acc);
      }
      store(g.d, g.d_dtype, at, acc);
    }
  }
  for (int i = 0; i < static_cast<int>(row_sums.size()); ++i)
    store(const_cast<void*>(g.bias), g.d_dtype, i, row_sums[i]);
}

}  // namespace

// The emulated GEMM needs no workspace; the side stream's is a token allocation.
size_t gemm_workspace_bytes() { return 256; }

nfn_status gemm(nfn_ctx* ctx, const char* op, const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return NFN_OK;
  NFN_TRY(check_gelu_aux(ctx, op, g));
  NFN_TRY(check_gemm_setup(ctx, op));
  ctx->cublaslt = ctx;  // set up, as cublaslt.cc's first GEMM creates the handle
  const bool with_aux = has_gelu_aux(g);
  const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  if (g.lda < a_rows || g.ldb < b_rows || g.ldd < g.m)
    return fail(ctx, NFN_ERR_BACKEND, "%s: leading dimension below the rows (lda=%d ldb=%d ldd=%d)", op, g.lda,
                g.ldb, g.ldd);
  const bool with_bias = g.epilogue == GemmEpilogue::bias || g.epilogue == GemmEpilogue::gelu_aux_bias;
  const bool bias_out = g.epilogue == GemmEpilogue::dgelu_bgrad;
  const char* outside = nullptr;
  if (!nfn_emu::inside_device(g.a, extent(a_rows, a_cols, g.lda, g.ab))) outside = "A";
  if (!nfn_emu::inside_device(g.b, extent(b_rows, b_cols, g.ldb, g.ab))) outside = "B";
  if (!nfn_emu::inside_device(g.d, extent(g.m, g.n, g.ldd, g.d_dtype))) outside = "D";
  const void* c = g.c != nullptr ? g.c : g.d;
  if (g.beta != 0.f && !nfn_emu::inside_device(c, extent(g.m, g.n, g.ldd, g.d_dtype))) outside = "C";
  if ((with_bias || bias_out) && !nfn_emu::inside_device(g.bias, g.m * dtype_size(g.d_dtype))) outside = "bias";
  if (with_aux && !nfn_emu::inside_device(g.aux, extent(g.m, g.n, g.m, g.d_dtype))) outside = "aux";
  if (outside != nullptr)
    return fail(ctx, NFN_ERR_BACKEND, "%s: cuBLASLt would read or write %s outside its allocation (m=%d n=%d k=%d)",
                op, outside, g.m, g.n, g.k);
  // The product runs on the context's stream: now, or when a graph that captured it runs.
  const cudaError_t err = nfn_emu::enqueue(ctx->stream, op, [g, c, with_bias, with_aux] {
    product(g, c, with_bias, with_aux);
    nfn_emu::check_device_canaries("the emulated GEMM (cuda/emu/gemm.cc)");
  });
  return err == cudaSuccess ? NFN_OK : fail(ctx, NFN_ERR_BACKEND, "%s: %s", op, cudaGetErrorString(err));
}

void gemm_release(nfn_ctx* ctx) { ctx->cublaslt = nullptr; }

}  // namespace nfn::cuda
