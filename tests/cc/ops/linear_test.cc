// linear_forward/backward (oneDNN GEMMs): forward against a naive double product, backward
// against finite differences (also through a GELU on the input, gelu_pre), the accumulate
// flags, and the bf16 GEMM mode.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

static const int N = 7, IC = 13, OC = 11;

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// pre (N,OC) = x @ w^T + b, in double; inputs optionally rounded to bf16 first.
static std::vector<double> ref_linear(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& b, bool round_bf16) {
  auto r = [&](float v) -> double {
    if (!round_bf16) return v;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    uint32_t low = u & 0xffff, up = u >> 16;
    if (low > 0x8000 || (low == 0x8000 && (up & 1))) ++up;
    u = up << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<double> y(N * OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int k = 0; k < IC; ++k) s += r(x[i * IC + k]) * r(w[o * IC + k]);
      y[i * OC + o] = s;
    }
  return y;
}

static void test_forward(nfn_ctx* ctx) {
  std::vector<float> x = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), b = random_vec(OC, 3);
  std::vector<float> y(N * OC), pre(N * OC);
  EXPECT(nfn_linear_forward(ctx, y.data(), nullptr, x.data(), w.data(), b.data(), nullptr, N, IC, OC,
                            NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward");
  std::vector<double> want = ref_linear(x, w, b, false);
  expect_close("linear_forward", y, want, 1e-5, 1e-5);
  EXPECT(nfn_linear_forward(ctx, y.data(), nullptr, x.data(), w.data(), nullptr, nullptr, N, IC, OC,
                            NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward no bias");
  expect_close("linear_forward without bias", y, ref_linear(x, w, {}, false), 1e-5, 1e-5);
  // Onto a residual: into another buffer, then in place (out is the residual).
  const std::vector<float> r = random_vec(N * OC, 12);
  std::vector<double> want_r = want;
  for (int i = 0; i < N * OC; ++i) want_r[i] += r[i];
  EXPECT(nfn_linear_forward(ctx, y.data(), nullptr, x.data(), w.data(), b.data(), r.data(), N, IC, OC,
                            NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward residual");
  expect_close("linear_forward residual", y, want_r, 1e-5, 1e-5);
  std::vector<float> stream = r;
  EXPECT(nfn_linear_forward(ctx, stream.data(), nullptr, x.data(), w.data(), b.data(), stream.data(), N, IC, OC,
                            NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward residual in place");
  expect_close("linear_forward residual in place", stream, want_r, 1e-5, 1e-5);
  EXPECT(nfn_linear_forward(ctx, y.data(), pre.data(), x.data(), w.data(), b.data(), nullptr, N, IC, OC,
                            NFN_EPILOGUE_GELU, NFN_F32) == NFN_OK, "linear_forward gelu");
  expect_close("linear_forward gelu pre", pre, want, 1e-5, 1e-5);
  for (auto& v : want) v = ref_gelu(v);
  expect_close("linear_forward gelu out", y, want, 1e-5, 1e-5);

  if (nfn_ctx_configure(ctx, "matmul", "bf16") == NFN_OK) {
    EXPECT(nfn_linear_forward(ctx, y.data(), nullptr, x.data(), w.data(), b.data(), nullptr, N, IC, OC,
                              NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward bf16 mode");
    // Products of bf16-rounded inputs, accumulated in f32: close to the rounded reference.
    expect_close("linear_forward matmul=bf16", y, ref_linear(x, w, b, true), 1e-4, 1e-4);
    double far = 0;
    std::vector<double> exact = ref_linear(x, w, b, false);
    for (int i = 0; i < N * OC; ++i) far = std::fmax(far, std::fabs(y[i] - exact[i]));
    EXPECT(far > 1e-5, "matmul=bf16 must actually round the inputs (max diff %g)", far);
    EXPECT(nfn_ctx_configure(ctx, "matmul", "f32") == NFN_OK, "back to f32");
  } else {
    std::printf("note: matmul=bf16 unsupported here: %s\n", nfn_ctx_last_error(ctx));
  }
}

static void test_backward(nfn_ctx* ctx, bool gelu) {
  std::vector<float> x = random_vec(N * IC, 4), w = random_vec(OC * IC, 5), b = random_vec(OC, 6);
  std::vector<float> y(N * OC), pre(N * OC), gy = random_vec(N * OC, 7);
  auto forward = [&] {
    EXPECT(nfn_linear_forward(ctx, y.data(), gelu ? pre.data() : nullptr, x.data(), w.data(), b.data(), nullptr, N,
                              IC, OC, gelu ? NFN_EPILOGUE_GELU : NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK,
           "linear_forward");
  };
  forward();
  std::vector<float> dpre = gy;  // through the GELU epilogue first, as the model does
  if (gelu) EXPECT(nfn_gelu_backward(ctx, dpre.data(), pre.data(), gy.data(), N * OC, NFN_F32) == NFN_OK, "gelu");
  std::vector<float> dx(N * IC, 0.f), dw(OC * IC, 0.5f), db(OC, -0.5f);
  EXPECT(nfn_linear_backward(ctx, dx.data(), dw.data(), db.data(), nullptr, dpre.data(), x.data(), w.data(), nullptr,
                             N, IC, OC, 0, NFN_F32) == NFN_OK, "linear_backward");
  auto loss = [&] { forward(); return weighted_sum(y, gy); };
  std::vector<double> nx = numeric_grad(x, loss), nw = numeric_grad(w, loss), nb = numeric_grad(b, loss);
  for (auto& g : nw) g += 0.5;
  for (auto& g : nb) g -= 0.5;
  const char* tag = gelu ? "linear_backward (gelu)" : "linear_backward";
  std::printf("%s checked\n", tag);
  expect_close("dinp", dx, nx, 2e-3, 1e-2);
  expect_close("dweight (accumulated)", dw, nw, 2e-3, 1e-2);
  expect_close("dbias (accumulated)", db, nb, 2e-3, 1e-2);

  // accumulate_dinp adds; 0 overwrites. Only dinp requested: the others stay untouched.
  // dinp_colsum sums dinp as the op leaves it (the added 1s too).
  std::vector<float> dx2(N * IC, 1.f), dsum(IC, -2.f);
  EXPECT(nfn_linear_backward(ctx, dx2.data(), nullptr, nullptr, dsum.data(), dpre.data(), nullptr, w.data(), nullptr,
                             N, IC, OC, 1, NFN_F32) == NFN_OK, "accumulate dinp");
  for (auto& g : nx) g += 1.0;
  expect_close("dinp accumulated", dx2, nx, 2e-3, 1e-2);
  std::vector<double> want_sum(IC, -2.0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < IC; ++c) want_sum[c] += dx2[i * IC + c];
  expect_close("dinp_colsum of the accumulated dinp", dsum, want_sum, 1e-5, 1e-5);
}

// A layer whose input is gelu(h) (GPT-2's fcproj): with gelu_pre = h, dinp is the gradient
// with respect to h. Against finite differences through the GELU, and exactly what
// linear_backward followed by gelu_backward gives; dinp_colsum is then the gradient of a
// bias added into h (fc's), against the finite differences' column sums.
static void test_backward_through_gelu(nfn_ctx* ctx) {
  std::vector<float> h = random_vec(N * IC, 8), w = random_vec(OC * IC, 9), b = random_vec(OC, 10);
  const std::vector<float> gy = random_vec(N * OC, 11);
  std::vector<float> x(N * IC), y(N * OC);
  auto loss = [&] {
    EXPECT(nfn_gelu_forward(ctx, x.data(), h.data(), N * IC, NFN_F32) == NFN_OK, "gelu_forward");
    EXPECT(nfn_linear_forward(ctx, y.data(), nullptr, x.data(), w.data(), b.data(), nullptr, N, IC, OC,
                              NFN_EPILOGUE_NONE, NFN_F32) == NFN_OK, "linear_forward");
    return weighted_sum(y, gy);
  };
  loss();
  std::vector<float> dh(N * IC, 7.f), dx(N * IC), dbh(IC, 0.25f);
  EXPECT(nfn_linear_backward(ctx, dh.data(), nullptr, nullptr, dbh.data(), gy.data(), x.data(), w.data(), h.data(), N,
                             IC, OC, 0, NFN_F32) == NFN_OK, "linear_backward through gelu");
  std::printf("linear_backward (gelu_pre) checked\n");
  const std::vector<double> nh = numeric_grad(h, loss);
  expect_close("dinp with respect to gelu_pre", dh, nh, 2e-3, 1e-2);
  std::vector<double> nbh(IC, 0.25);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < IC; ++c) nbh[c] += nh[i * IC + c];
  expect_close("dinp_colsum: the gradient of a bias in gelu_pre (accumulated)", dbh, nbh, 2e-3, 1e-2);
  EXPECT(nfn_linear_backward(ctx, dx.data(), nullptr, nullptr, nullptr, gy.data(), x.data(), w.data(), nullptr, N, IC,
                             OC, 0, NFN_F32) == NFN_OK &&
             nfn_gelu_backward(ctx, dx.data(), h.data(), dx.data(), N * IC, NFN_F32) == NFN_OK,
         "linear_backward, then gelu_backward");
  EXPECT(std::memcmp(dx.data(), dh.data(), dx.size() * sizeof(float)) == 0,
         "gelu_pre gives exactly linear_backward then gelu_backward");
}

static void test_bad_arguments(nfn_ctx* ctx) {
  std::vector<float> buf(N * IC * OC);
  float* p = buf.data();
  expect_invalid(ctx, nfn_linear_forward(ctx, p, nullptr, p, p, nullptr, nullptr, N, 0, OC, NFN_EPILOGUE_NONE,
                                         NFN_F32), "linear_forward", "IC=0");
  expect_invalid(ctx, nfn_linear_forward(ctx, p, nullptr, p, p, nullptr, nullptr, N, IC, OC, NFN_EPILOGUE_GELU,
                                         NFN_F32), "linear_forward", "GELU without aux");
  expect_invalid(ctx, nfn_linear_forward(ctx, p, nullptr, p, p, nullptr, nullptr, N, IC, OC,
                                         static_cast<nfn_epilogue>(9), NFN_F32), "linear_forward", "bad epilogue");
  std::vector<float> aux(N * OC);
  expect_invalid(ctx, nfn_linear_forward(ctx, p, aux.data(), p, p, nullptr, p, N, IC, OC, NFN_EPILOGUE_GELU,
                                         NFN_F32), "linear_forward", "GELU with a residual");
  expect_invalid(ctx, nfn_linear_backward(ctx, buf.data(), nullptr, nullptr, nullptr, buf.data(), buf.data(), nullptr,
                                          nullptr, N, IC, OC, 0, NFN_F32), "linear_backward", "dinp without weight");
  expect_invalid(ctx, nfn_linear_backward(ctx, buf.data(), nullptr, nullptr, nullptr, buf.data(), buf.data(),
                                          buf.data(), buf.data(), N, IC, OC, 1, NFN_F32), "linear_backward",
                 "gelu_pre with accumulate_dinp");
  expect_invalid(ctx, nfn_linear_backward(ctx, nullptr, buf.data(), nullptr, nullptr, buf.data(), buf.data(),
                                          buf.data(), buf.data(), N, IC, OC, 0, NFN_F32), "linear_backward",
                 "gelu_pre without dinp");
  expect_invalid(ctx, nfn_linear_backward(ctx, nullptr, buf.data(), nullptr, buf.data(), buf.data(), buf.data(),
                                          buf.data(), nullptr, N, IC, OC, 0, NFN_F32), "linear_backward",
                 "dinp_colsum without dinp");
  EXPECT(nfn_linear_forward(ctx, buf.data(), nullptr, buf.data(), buf.data(), nullptr, nullptr, N, IC, OC,
                            NFN_EPILOGUE_NONE, NFN_BF16) == NFN_ERR_UNSUPPORTED, "bf16 storage unsupported");
  expect_invalid(ctx, nfn_ctx_configure(ctx, "matmul", "fp8"), "configure", "matmul=fp8");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  test_forward(ctx);
  test_backward(ctx, false);
  test_backward(ctx, true);
  test_backward_through_gelu(ctx);
  test_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("linear_test");
}
