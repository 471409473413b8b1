// GEMMs for the CPU ops (no hand-rolled GEMM): f32 through OpenBLAS, bf16 through oneDNN.
#pragma once

#include <cstdint>

#include "cc/ops/cpu/context.h"

namespace nfn::cpu {

// C (M,N) = alpha * op(A) @ op(B) [+ bias (N)] [+ C when accumulate], all f32, row-major.
// op(A) is (M,K): A is stored (M,K), or (K,M) when trans_a; likewise op(B) is (K,N), stored
// (N,K) when trans_b. lda/ldb/ldc are the row strides of the stored matrices.
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
  // In bf16 mode: B already rounded to bf16, stored like B but packed (row stride = its
  // stored column count), so a weight used by many GEMMs of one op is rounded once.
  const uint16_t* B_bf16 = nullptr;
};

// Runs the product on the op's threads, in bf16 (inputs rounded, f32 accumulation) when the
// context asks for it (matmul=bf16); on failure records "<op>: ..." on the context.
nfn_status gemm(nfn_ctx* ctx, const char* op, const Gemm& g);

// The three products of a linear layer y (N,OC) = x (N,IC) @ w (OC,IC)^T, all row-major: the
// linear ops and the LM head (x the final norm's output, w the token embedding) use them.
// y = x w^T (+ y when accumulating).
inline Gemm linear_output(float* y, const float* x, const float* w, int64_t N, int64_t IC, int64_t OC) {
  Gemm g;
  g.M = N, g.N = OC, g.K = IC;
  g.A = x, g.lda = IC;
  g.B = w, g.ldb = IC, g.trans_b = true;
  g.C = y, g.ldc = OC;
  return g;
}

// dx = dy w (+ dx when accumulating).
inline Gemm linear_input_grad(float* dx, const float* dy, const float* w, int64_t N, int64_t IC, int64_t OC) {
  Gemm g;
  g.M = N, g.N = IC, g.K = OC;
  g.A = dy, g.lda = OC;
  g.B = w, g.ldb = IC;
  g.C = dx, g.ldc = IC;
  return g;
}

// dw += dy^T x.
inline Gemm linear_weight_grad(float* dw, const float* x, const float* dy, int64_t N, int64_t IC, int64_t OC) {
  Gemm g;
  g.M = OC, g.N = IC, g.K = N;
  g.A = dy, g.lda = OC, g.trans_a = true;
  g.B = x, g.ldb = IC;
  g.C = dw, g.ldc = IC;
  g.accumulate = true;
  return g;
}

// An f32 product on the calling thread only, for ops that parallelize over independent
// blocks themselves (attention in f32 mode). No bias; shapes are the caller's to check.
void gemm_f32_serial(const Gemm& g);

// A bf16 product on the calling thread, of operands already rounded to bf16 and row-major
// (B stored (N,K) when trans_b), into f32: C (M,N) = alpha op(A) op(B) (+ C). For ops that
// parallelize over independent blocks themselves (attention in matmul=bf16 mode).
struct GemmBf16 {
  int64_t M = 0, N = 0, K = 0;
  const uint16_t* A = nullptr;
  int64_t lda = 0;
  const uint16_t* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float* C = nullptr;
  int64_t ldc = 0;
  float alpha = 1.f;
  bool accumulate = false;
};

// Creates the primitive for g's shape (pointers unused) for up to `threads` threads to run
// at once, outside any parallel region: primitives are made for one thread, since each runs
// on one of the op's threads.
nfn_status prepare_gemm_bf16_serial(nfn_ctx* ctx, const char* op, const GemmBf16& g, int threads);

// Runs a product whose shape was prepared, on the calling thread `thread` (below the
// prepared count), inside the op's parallel region. Returns false if oneDNN failed; the op
// reports it after its parallel region.
bool gemm_bf16_serial(nfn_ctx* ctx, const GemmBf16& g, int thread);

// The product through oneDNN (gemm_bf16.cc), which gemm calls with bf16=true in matmul=bf16
// mode. bf16=false runs the same packing, descriptors and primitive cache with f32 operands:
// how tests check this path on CPUs without bf16 matmuls.
nfn_status gemm_onednn(nfn_ctx* ctx, const char* op, const Gemm& g, bool bf16);

// Whether this CPU runs bf16 matmuls (checked once by building a small one).
bool bf16_gemm_supported(nfn_ctx* ctx);

// The context's GEMM state: the primitive cache, bf16 staging buffers.
struct GemmState;
void destroy_gemm_state(GemmState* state);

}  // namespace nfn::cpu
