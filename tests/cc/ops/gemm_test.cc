// nfn::cpu::gemm against a naive double product: every combination of transposed operands,
// bias, accumulation and alpha, with padded row strides, at shapes that run on one thread and
// shapes split over threads by rows and by columns (including blocks that do not divide
// evenly), one-row products (the sgemv path of a decode step, alone and split by columns), the
// single-threaded entry point, and the oneDNN path that matmul=bf16 uses, run
// with f32 operands (its packing, descriptors and primitive cache; one context for every
// case, so a cache key that misses a layout difference fails here).
#include <omp.h>

#include <vector>

#include "cc/ops/cpu/context.h"
#include "cc/ops/cpu/gemm.h"
#include "tests/cc/ops/op_test_util.h"

using nfn::cpu::Gemm;
using nfn_test::expect_close;
using nfn_test::random_vec;

namespace {

struct Case {
  int64_t M, N, K;
  bool ta, tb, bias, accumulate;
  float alpha;
};

enum class Path { gemm, serial, onednn };

void check(nfn_ctx* ctx, const Case& c, Path path) {
  const int64_t pad = 3;  // every stored row is longer than the matrix it holds
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
  std::vector<float> A = random_vec(a_rows * lda, 1), B = random_vec(b_rows * ldb, 2);
  std::vector<float> bias = random_vec(c.N, 3), C0 = random_vec(c.M * ldc, 4), C = C0;
  Gemm g;
  g.M = c.M, g.N = c.N, g.K = c.K;
  g.A = A.data(), g.lda = lda, g.trans_a = c.ta;
  g.B = B.data(), g.ldb = ldb, g.trans_b = c.tb;
  g.C = C.data(), g.ldc = ldc;
  g.bias = c.bias ? bias.data() : nullptr;
  g.accumulate = c.accumulate, g.alpha = c.alpha;
  if (path == Path::serial) {
    nfn::cpu::gemm_f32_serial(g);
  } else {
    const nfn_status s = path == Path::gemm ? nfn::cpu::gemm(ctx, "gemm_test", g)
                                            : nfn::cpu::gemm_onednn(ctx, "gemm_test", g, false);
    EXPECT(s == NFN_OK, "gemm: %s", nfn_ctx_last_error(ctx));
  }
  std::vector<double> want(C0.begin(), C0.end());  // padding must stay as it was
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[k * lda + i] : A[i * lda + k];
        const double b = c.tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      double& out = want[i * ldc + j];
      out = c.alpha * s + (c.bias ? bias[j] : 0.0) + (c.accumulate ? out : 0.0);
    }
  char what[160];
  std::snprintf(what, sizeof what, "gemm M=%ld N=%ld K=%ld ta=%d tb=%d bias=%d acc=%d alpha=%g%s",
                static_cast<long>(c.M), static_cast<long>(c.N), static_cast<long>(c.K), c.ta, c.tb,
                c.bias, c.accumulate, c.alpha, path == Path::serial ? " serial" : path == Path::onednn ? " onednn" : "");
  expect_close(what, C, want, 1e-4, 1e-4);
}

}  // namespace

int main() {
  omp_set_num_threads(3);  // an odd thread count: blocks that do not divide evenly
  nfn_ctx* ctx = nullptr;
  EXPECT(nfn_ctx_create(0, &ctx) == NFN_OK, "ctx");
  const int64_t shapes[][3] = {{5, 7, 3}, {301, 70, 40}, {70, 301, 40}, {64, 64, 513}, {1, 7, 5}, {1, 2000, 300}};
  for (const auto& s : shapes)
    for (int flags = 0; flags < 16; ++flags) {
      const bool ta = flags & 1, tb = flags & 2, bias = flags & 4, acc = flags & 8;
      for (Path path : {Path::gemm, Path::onednn}) check(ctx, {s[0], s[1], s[2], ta, tb, bias, acc, 1.f}, path);
    }
  for (Path path : {Path::gemm, Path::onednn})  // alpha with accumulate
    check(ctx, {301, 70, 40, true, false, false, true, 0.5f}, path);
  for (int flags = 0; flags < 8; ++flags) {  // the serial form (attention's): no bias
    const bool ta = flags & 1, tb = flags & 2, acc = flags & 4;
    check(ctx, {33, 17, 9, ta, tb, false, acc, 0.25f}, Path::serial);
  }
  // K = 0 is refused with one line naming the op.
  std::vector<float> x(16, 1.f), y(16);
  Gemm g;
  g.M = g.N = 4, g.K = 0, g.A = g.B = x.data(), g.C = y.data(), g.lda = g.ldb = g.ldc = 4;
  nfn_test::expect_invalid(ctx, nfn::cpu::gemm(ctx, "gemm_test", g), "gemm_test", "K=0");
  nfn_ctx_destroy(ctx);
  return nfn_test::finish("gemm_test");
}
