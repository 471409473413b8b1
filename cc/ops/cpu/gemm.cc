// nfn::cpu::gemm: f32 products through OpenBLAS, bf16 ones (matmul=bf16) through oneDNN
// (gemm_bf16.cc).
//
// A product of one row runs as sgemv (no packing of the other operand).
//
// Why two libraries: on an AVX2 host (AMD EPYC, 2 threads) OpenBLAS runs the trainer's f32
// shapes at 105-135 GFLOP/s where oneDNN 2023.2 runs them at 85-127 and about half that for a
// transposed A; this OpenBLAS build has no bf16 GEMM, which oneDNN has where the CPU does.
#include "cc/ops/cpu/gemm.h"

#include <algorithm>
#include <cstring>

#include <cblas.h>
#include <omp.h>

namespace nfn::cpu {

namespace {

// Set when the library loads: every OpenBLAS call runs on its caller's thread.
const bool openblas_single_threaded = (scipy_openblas_set_num_threads(1), true);

// C's one row (n columns) = alpha a op(B) + beta C as a matrix-vector product: sgemm would pack
// the whole of B for it (a decode step's weight, every token), sgemv reads B once in place.
void one_row(const Gemm& g, const float* a, const float* b, float* c, int64_t n, float beta) {
  const int64_t inc_a = g.trans_a ? g.lda : 1;  // op(A)'s one row: A's row, or A's first column
  if (g.trans_b)  // B stored (n, K): c = B a
    scipy_cblas_sgemv(CblasRowMajor, CblasNoTrans, n, g.K, g.alpha, b, g.ldb, a, inc_a, beta, c, 1);
  else  // B stored (K, n): c = B^T a
    scipy_cblas_sgemv(CblasRowMajor, CblasTrans, g.K, n, g.alpha, b, g.ldb, a, inc_a, beta, c, 1);
}

// One f32 product through OpenBLAS. OpenBLAS runs single-threaded inside OpenMP's threads,
// each on its own block of C's rows or columns: its own thread pool would spin against
// OpenMP's between ops, and every op's threads stay the OpenMP ones.
void openblas_gemm(const Gemm& g) {
  if (g.bias != nullptr) {  // C = bias [+ C], then the product adds into it
#pragma omp parallel for schedule(static) if (g.M * g.N > (1 << 15))
    for (int64_t r = 0; r < g.M; ++r) {
      float* c = g.C + r * g.ldc;
      if (g.accumulate) {
        for (int64_t j = 0; j < g.N; ++j) c[j] += g.bias[j];
      } else {
        std::memcpy(c, g.bias, sizeof(float) * g.N);
      }
    }
  }
  const float beta = g.accumulate || g.bias != nullptr ? 1.f : 0.f;
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const bool split_rows = g.M >= g.N;
  const int64_t extent = split_rows ? g.M : g.N;
  const int parts = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(1, extent / 32)));
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1 && g.M * g.N * g.K > (1 << 18))
  for (int p = 0; p < parts; ++p) {
    // Block p of the split dimension, in multiples of 16 so the kernels' tiles stay whole.
    const int64_t per = (extent / parts + 15) / 16 * 16;
    const int64_t begin = std::min(extent, p * per), end = p == parts - 1 ? extent : std::min(extent, begin + per);
    if (begin >= end) continue;
    const float* a = g.A;
    const float* b = g.B;
    float* c = g.C;
    int64_t m = g.M, n = g.N;
    if (split_rows) {  // rows begin..end of op(A) and C
      a += g.trans_a ? begin : begin * g.lda;
      c += begin * g.ldc;
      m = end - begin;
    } else {  // columns begin..end of op(B) and C
      b += g.trans_b ? begin * g.ldb : begin;
      c += begin;
      n = end - begin;
    }
    if (m == 1)
      one_row(g, a, b, c, n, beta);
    else
      scipy_cblas_sgemm(CblasRowMajor, ta, tb, m, n, g.K, g.alpha, a, g.lda, b, g.ldb, beta, c, g.ldc);
  }
}

}  // namespace

void gemm_f32_serial(const Gemm& g) {
  scipy_cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                    g.trans_b ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, g.alpha, g.A, g.lda,
                    g.B, g.ldb, g.accumulate ? 1.f : 0.f, g.C, g.ldc);
}

nfn_status gemm(nfn_ctx* ctx, const char* op, const Gemm& g) {
  if (g.M <= 0 || g.N <= 0) return NFN_OK;
  if (g.K <= 0) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: GEMM with K=%lld", op, static_cast<long long>(g.K));
  if (ctx->matmul_bf16) return gemm_onednn(ctx, op, g, true);
  openblas_gemm(g);
  return NFN_OK;
}

}  // namespace nfn::cpu
