// LayerNorm and RMSNorm: forward against double references (RMSNorm at two eps), backward
// against finite differences, and the accumulate (+=) contract of every gradient
// (LayerNorm's dinp_colsum: against double column sums of the dinp it leaves).
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

static const int N = 6, C = 19;

// with_bias also asks for dinp_colsum (the other call: NULL).
static void test_layernorm(nfn_ctx* ctx, bool with_bias) {
  std::vector<float> x = random_vec(N * C, 1, 2.f), w = random_vec(C, 2), b = random_vec(C, 3);
  for (int c = 0; c < C; ++c) x[c] += 3.f;  // a row with a large mean
  std::vector<float> y(N * C), mean(N), rstd(N), gw = random_vec(N * C, 4);
  const float* bias = with_bias ? b.data() : nullptr;
  auto forward = [&] {
    EXPECT(nfn_layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C,
                                 NFN_F32) == NFN_OK, "layernorm_forward");
  };
  forward();
  std::vector<double> want(N * C), want_mean(N), want_rstd(N);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    double r = 1.0 / std::sqrt(v / C + 1e-5);
    want_mean[i] = m, want_rstd[i] = r;
    for (int c = 0; c < C; ++c) want[i * C + c] = (x[i * C + c] - m) * r * w[c] + (with_bias ? b[c] : 0.0);
  }
  expect_close("layernorm_forward out", y, want, 1e-5, 1e-5);
  expect_close("layernorm_forward mean", mean, want_mean, 1e-6, 1e-5);
  expect_close("layernorm_forward rstd", rstd, want_rstd, 1e-6, 1e-5);

  std::vector<float> dx(N * C, 0.125f), dw(C, 1.f), db(C, -1.f), dsum(C, 0.5f);
  EXPECT(nfn_layernorm_backward(ctx, dx.data(), dw.data(), with_bias ? db.data() : nullptr,
                                with_bias ? dsum.data() : nullptr, gw.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), N, C, NFN_F32) == NFN_OK,
         "layernorm_backward");
  if (with_bias) {
    std::vector<double> want_sum(C, 0.5);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) want_sum[c] += dx[i * C + c];
    expect_close("layernorm_backward dinp_colsum", dsum, want_sum, 1e-5, 1e-5);
  }
  auto loss = [&] { forward(); return weighted_sum(y, gw); };
  std::vector<double> nx = numeric_grad(x, loss), nw = numeric_grad(w, loss), nb = numeric_grad(b, loss);
  for (auto& g : nx) g += 0.125;
  for (auto& g : nw) g += 1.0;
  for (auto& g : nb) g -= 1.0;
  expect_close("layernorm_backward dinp", dx, nx, 2e-3, 1e-2);
  expect_close("layernorm_backward dweight", dw, nw, 2e-3, 1e-2);
  if (with_bias) expect_close("layernorm_backward dbias", db, nb, 2e-3, 1e-2);
}

// rstd and out of rows x (N,C) in double, for the given eps.
static void rmsnorm_reference(const std::vector<float>& x, const float* w, double eps, std::vector<double>* out,
                              std::vector<double>* rstd) {
  out->assign(N * C, 0.0), rstd->assign(N, 0.0);
  for (int i = 0; i < N; ++i) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(x[i * C + c]) * x[i * C + c];
    (*rstd)[i] = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) (*out)[i * C + c] = x[i * C + c] * (*rstd)[i] * (w ? w[c] : 1.0);
  }
}

static void test_rmsnorm(nfn_ctx* ctx, bool with_weight) {
  std::vector<float> x = random_vec(N * C, 5, 1.5f), w = random_vec(C, 6);
  std::vector<float> y(N * C), rstd(N), gw = random_vec(N * C, 7);
  const float* weight = with_weight ? w.data() : nullptr;
  auto forward = [&] {
    EXPECT(nfn_rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), weight, N, C, 1e-5f, NFN_F32) == NFN_OK,
           "rmsnorm_forward");
  };
  forward();
  std::vector<double> want, want_rstd;
  rmsnorm_reference(x, weight, 1e-5, &want, &want_rstd);
  expect_close("rmsnorm_forward out", y, want, 1e-5, 1e-5);
  expect_close("rmsnorm_forward rstd", rstd, want_rstd, 1e-6, 1e-5);

  std::vector<float> dx(N * C, -0.5f), dw(C, 0.25f);
  EXPECT(nfn_rmsnorm_backward(ctx, dx.data(), with_weight ? dw.data() : nullptr, gw.data(), x.data(), weight,
                              rstd.data(), N, C, NFN_F32) == NFN_OK, "rmsnorm_backward");
  auto loss = [&] { forward(); return weighted_sum(y, gw); };
  std::vector<double> nx = numeric_grad(x, loss), nw = numeric_grad(w, loss);
  for (auto& g : nx) g -= 0.5;
  for (auto& g : nw) g += 0.25;
  expect_close("rmsnorm_backward dinp", dx, nx, 2e-3, 1e-2);
  if (with_weight) expect_close("rmsnorm_backward dweight", dw, nw, 2e-3, 1e-2);
}

// The caller's eps (llama's rms_norm_eps): on rows whose mean square (about 1e-5) is of the
// order of eps, 1e-6 and 1e-5 each give their own reference's result, and the two differ by
// far more than the tolerance.
static void test_rmsnorm_eps(nfn_ctx* ctx) {
  const std::vector<float> x = random_vec(N * C, 8, 3e-3f), w = random_vec(C, 9);
  std::vector<float> y[2], rstd[2];
  const float eps[2] = {1e-6f, 1e-5f};
  for (int k = 0; k < 2; ++k) {
    y[k].resize(N * C), rstd[k].resize(N);
    EXPECT(nfn_rmsnorm_forward(ctx, y[k].data(), rstd[k].data(), x.data(), w.data(), N, C, eps[k], NFN_F32) ==
               NFN_OK, "rmsnorm_forward eps %g", static_cast<double>(eps[k]));
    std::vector<double> want, want_rstd;
    rmsnorm_reference(x, w.data(), eps[k], &want, &want_rstd);
    expect_close(k == 0 ? "rmsnorm_forward out, eps 1e-6" : "rmsnorm_forward out, eps 1e-5", y[k], want, 1e-5, 1e-5);
    expect_close(k == 0 ? "rmsnorm_forward rstd, eps 1e-6" : "rmsnorm_forward rstd, eps 1e-5", rstd[k], want_rstd,
                 1e-6, 1e-5);
  }
  for (int i = 0; i < N; ++i)
    EXPECT(rstd[0][i] > 1.1f * rstd[1][i], "row %d: rstd %g at eps 1e-6 vs %g at 1e-5", i, rstd[0][i], rstd[1][i]);
}

static void test_bad_arguments(nfn_ctx* ctx) {
  std::vector<float> buf(N * C), stats(N);
  expect_invalid(ctx, nfn_layernorm_forward(ctx, buf.data(), stats.data(), stats.data(), buf.data(), nullptr,
                                            nullptr, N, C, NFN_F32), "layernorm_forward", "null weight");
  expect_invalid(ctx, nfn_layernorm_backward(ctx, buf.data(), buf.data(), nullptr, nullptr, buf.data(), buf.data(),
                                             buf.data(), stats.data(), stats.data(), N, -1, NFN_F32),
                 "layernorm_backward", "C=-1");
  expect_invalid(ctx, nfn_rmsnorm_forward(ctx, buf.data(), stats.data(), buf.data(), nullptr, 0, C, 1e-5f, NFN_F32),
                 "rmsnorm_forward", "N=0");
  for (float eps : {0.f, -1e-5f, INFINITY, NAN})
    expect_invalid(ctx, nfn_rmsnorm_forward(ctx, buf.data(), stats.data(), buf.data(), nullptr, N, C, eps, NFN_F32),
                   "rmsnorm_forward", "eps not positive and finite");
  expect_invalid(ctx, nfn_rmsnorm_backward(ctx, buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                                           stats.data(), N, C, NFN_F32), "rmsnorm_backward", "dweight without weight");
  EXPECT(nfn_rmsnorm_forward(ctx, buf.data(), stats.data(), buf.data(), nullptr, N, C, 1e-5f, NFN_BF16) ==
             NFN_ERR_UNSUPPORTED, "bf16 rmsnorm is unsupported on the CPU");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  test_layernorm(ctx, true);
  test_layernorm(ctx, false);
  test_rmsnorm(ctx, true);
  test_rmsnorm(ctx, false);
  test_rmsnorm_eps(ctx);
  test_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("norm_test");
}
