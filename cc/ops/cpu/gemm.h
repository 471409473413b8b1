// GEMMs for the CPU ops, through oneDNN's matmul (no hand-rolled GEMM). Primitives are
// created once per shape and cached on the context, because creating one costs far more
// than running a small one.
#pragma once

#include <cstdint>

#include "cc/ops/cpu/context.h"

namespace nfn::cpu {

// C (M,N) = alpha * op(A) @ op(B) [+ bias (N)] [+ C when accumulate], all f32, row-major.
// op(A) is (M,K): A is stored (M,K), or (K,M) when trans_a; likewise op(B) is (K,N), stored
// (N,K) when trans_b. lda/ldb/ldc are the row strides of the stored matrices.
// batch[0] x batch[1] independent products run in one call (attention's (batch, head)
// blocks); product (i, j) reads A + i*stride_a[0] + j*stride_a[1], likewise B and C.
struct Gemm {
  int64_t M = 0, N = 0, K = 0;
  const float* A = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const float* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float* C = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;
  bool accumulate = false;
  float alpha = 1.f;
  int64_t batch[2] = {1, 1};
  int64_t stride_a[2] = {0, 0}, stride_b[2] = {0, 0}, stride_c[2] = {0, 0};
  // Multiply in bf16 (inputs rounded, f32 accumulation) when the context asks for it
  // (matmul=bf16). Attention keeps f32: its products are small and feed exp().
  bool allow_bf16 = true;
  // In bf16 mode: B already rounded to bf16, stored like B but packed (row stride = its
  // stored column count), so a weight used by many GEMMs of one op is rounded once.
  const uint16_t* B_bf16 = nullptr;
};

// Runs the product; on failure records "<op>: ..." on the context.
nfn_status gemm(nfn_ctx* ctx, const char* op, const Gemm& g);

// Whether this CPU runs bf16 matmuls (checked once by building a small one).
bool bf16_gemm_supported(nfn_ctx* ctx);

// The context's GEMM state: the primitive cache, bf16 staging buffers.
struct GemmState;
void destroy_gemm_state(GemmState* state);

}  // namespace nfn::cpu
