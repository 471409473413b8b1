// GELU, ReLU², SwiGLU, tanh soft-capping and the residual add: forwards against double
// references written here, backwards against finite differences (also in place where the op
// allows it), bad arguments.
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_silu(double g) { return g / (1.0 + std::exp(-g)); }

// relu(x)^2 and its gradient 2 relu(x) dout; values spread across 0 so both sides are hit.
static void check_relu_squared(nfn_ctx* ctx) {
  const size_t n = 10007;
  std::vector<float> x = random_vec(n, 6, 2.f), y(n), g = random_vec(n, 7), dx(n);
  EXPECT(nfn_relu_squared_forward(ctx, y.data(), x.data(), n, NFN_F32) == NFN_OK, "relu_squared_forward");
  std::vector<double> want(n), num(n);
  for (size_t i = 0; i < n; ++i) want[i] = x[i] > 0 ? static_cast<double>(x[i]) * x[i] : 0.0;
  expect_close("relu_squared_forward", y, want, 1e-30, 1e-7);
  EXPECT(nfn_relu_squared_backward(ctx, dx.data(), x.data(), g.data(), n, NFN_F32) == NFN_OK, "relu_squared_backward");
  auto relu2 = [](double v) { return v > 0 ? v * v : 0.0; };
  for (size_t i = 0; i < n; ++i)  // x^2 is quadratic: its central difference is exact
    num[i] = g[i] * (relu2(x[i] + 1e-3) - relu2(x[i] - 1e-3)) / 2e-3;
  for (size_t i = 0; i < n; ++i)  // within 1e-3 of the kink the difference averages the sides
    if (std::fabs(x[i]) < 1e-3) num[i] = 2.0 * g[i] * std::fmax(x[i], 0.f);
  expect_close("relu_squared_backward", dx, num, 1e-6, 1e-5);
  std::vector<float> alias = g;
  EXPECT(nfn_relu_squared_backward(ctx, alias.data(), x.data(), alias.data(), n, NFN_F32) == NFN_OK, "aliased");
  EXPECT(alias == dx, "relu_squared_backward with dinp aliasing dout must give the same result");
  expect_invalid(ctx, nfn_relu_squared_forward(ctx, y.data(), nullptr, n, NFN_F32), "relu_squared_forward",
                 "null inp");
  expect_invalid(ctx, nfn_relu_squared_backward(ctx, nullptr, x.data(), g.data(), n, NFN_F32),
                 "relu_squared_backward", "null dinp");
}

// SwiGLU on a fused (N, 2H) [gate | up] row; the backward against central differences of
// sum(w * out) with respect to both halves, and again in place over inp.
static void check_swiglu(nfn_ctx* ctx) {
  const int N = 37, H = 29;
  std::vector<float> x = random_vec(N * 2 * H, 8, 3.f), y(N * H), w = random_vec(N * H, 9), dx(N * 2 * H);
  EXPECT(nfn_swiglu_forward(ctx, y.data(), x.data(), N, H, NFN_F32) == NFN_OK, "swiglu_forward");
  std::vector<double> want(N * H);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < H; ++c) want[i * H + c] = ref_silu(x[i * 2 * H + c]) * x[i * 2 * H + H + c];
  expect_close("swiglu_forward", y, want, 1e-6, 1e-5);
  EXPECT(nfn_swiglu_backward(ctx, dx.data(), x.data(), w.data(), N, H, NFN_F32) == NFN_OK, "swiglu_backward");
  const std::vector<double> num = numeric_grad(x, [&] {
    nfn_swiglu_forward(ctx, y.data(), x.data(), N, H, NFN_F32);
    return weighted_sum(y, w);
  });
  expect_close("swiglu_backward", dx, num, 1e-3, 1e-2);
  std::vector<float> in_place = x;
  EXPECT(nfn_swiglu_backward(ctx, in_place.data(), in_place.data(), w.data(), N, H, NFN_F32) == NFN_OK, "in place");
  EXPECT(in_place == dx, "swiglu_backward with dinp aliasing inp must give the same result");
  expect_invalid(ctx, nfn_swiglu_forward(ctx, y.data(), x.data(), N, 0, NFN_F32), "swiglu_forward", "H=0");
  expect_invalid(ctx, nfn_swiglu_backward(ctx, dx.data(), x.data(), nullptr, N, H, NFN_F32), "swiglu_backward",
                 "null dout");
}

// cap * tanh(x / cap) at nanochat's cap of 15, on values from far inside the cap (where the
// result is about x) to far past it (where it saturates and the gradient is tiny).
static void check_softcap(nfn_ctx* ctx) {
  const size_t n = 10007;
  const float cap = 15.f;
  std::vector<float> x = random_vec(n, 10, 20.f), y(n), g = random_vec(n, 11), dx(n);
  for (size_t i = 0; i < n; i += 10) x[i] *= 1e-4f;  // tiny logits keep their relative precision
  EXPECT(nfn_softcap_forward(ctx, y.data(), x.data(), n, cap, NFN_F32) == NFN_OK, "softcap_forward");
  std::vector<double> want(n), grad(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = cap * std::tanh(static_cast<double>(x[i]) / cap);
    const double ch = std::cosh(static_cast<double>(x[i]) / cap);
    grad[i] = g[i] / (ch * ch);  // d/dx cap tanh(x/cap) = sech^2(x/cap)
  }
  expect_close("softcap_forward", y, want, 1e-30, 2e-6);
  EXPECT(nfn_softcap_backward(ctx, dx.data(), x.data(), g.data(), n, cap, NFN_F32) == NFN_OK, "softcap_backward");
  expect_close("softcap_backward", dx, grad, 1e-30, 2e-6);
  std::vector<double> num(n);
  for (size_t i = 0; i < n; ++i)  // the analytic sech^2 above, checked by central differences
    num[i] = g[i] * cap * (std::tanh((x[i] + 1e-4) / cap) - std::tanh((x[i] - 1e-4) / cap)) / 2e-4;
  expect_close("softcap_backward (finite differences)", dx, num, 1e-7, 1e-5);
  std::vector<float> in_place = x;
  EXPECT(nfn_softcap_forward(ctx, in_place.data(), in_place.data(), n, cap, NFN_F32) == NFN_OK, "in place");
  EXPECT(in_place == y, "softcap_forward in place must give the same result");
  for (float bad : {0.f, -1.f, NAN, INFINITY})
    expect_invalid(ctx, nfn_softcap_forward(ctx, y.data(), x.data(), n, bad, NFN_F32), "softcap_forward",
                   "cap <= 0 or not finite");
  expect_invalid(ctx, nfn_softcap_backward(ctx, dx.data(), x.data(), g.data(), n, 0.f, NFN_F32), "softcap_backward",
                 "cap = 0");
  EXPECT(nfn_softcap_forward(ctx, y.data(), x.data(), n, cap, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "softcap_forward: bf16 storage is unsupported on the CPU");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  const size_t n = 10007;  // big enough for the threaded path
  std::vector<float> x = random_vec(n, 1, 3.f), y(n), g = random_vec(n, 2);
  EXPECT(nfn_gelu_forward(ctx, y.data(), x.data(), n, NFN_F32) == NFN_OK, "gelu_forward");
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = ref_gelu(x[i]);
  expect_close("gelu_forward", y, want, 1e-6, 1e-5);

  std::vector<float> dx(n);
  EXPECT(nfn_gelu_backward(ctx, dx.data(), x.data(), g.data(), n, NFN_F32) == NFN_OK, "gelu_backward");
  std::vector<double> num(n);
  for (size_t i = 0; i < n; ++i)  // d/dx of gelu at x, central difference in double
    num[i] = g[i] * (ref_gelu(x[i] + 1e-4) - ref_gelu(x[i] - 1e-4)) / 2e-4;
  expect_close("gelu_backward", dx, num, 1e-5, 1e-4);
  std::vector<float> alias = g;
  EXPECT(nfn_gelu_backward(ctx, alias.data(), x.data(), alias.data(), n, NFN_F32) == NFN_OK, "aliased");
  EXPECT(alias == dx, "gelu_backward with dinp aliasing dout must give the same result");

  const int N = 5, C = 9;
  std::vector<float> r = random_vec(N * C, 3), in = random_vec(N * C, 4), b = random_vec(C, 5), out(N * C);
  std::vector<double> want_res(N * C);
  for (int i = 0; i < N * C; ++i) want_res[i] = static_cast<double>(r[i]) + in[i] + b[i % C];
  EXPECT(nfn_residual_forward(ctx, out.data(), r.data(), in.data(), b.data(), N, C, NFN_F32) == NFN_OK, "residual");
  expect_close("residual_forward", out, want_res, 1e-6, 1e-6);
  EXPECT(nfn_residual_forward(ctx, r.data(), r.data(), in.data(), b.data(), N, C, NFN_F32) == NFN_OK, "aliased");
  expect_close("residual_forward in place", r, want_res, 1e-6, 1e-6);
  EXPECT(nfn_residual_forward(ctx, out.data(), in.data(), in.data(), nullptr, N, C, NFN_F32) == NFN_OK, "no bias");
  for (int i = 0; i < N * C; ++i) want_res[i] = 2.0 * in[i];
  expect_close("residual_forward without bias", out, want_res, 1e-6, 1e-6);

  expect_invalid(ctx, nfn_gelu_forward(ctx, nullptr, x.data(), n, NFN_F32), "gelu_forward", "null out");
  expect_invalid(ctx, nfn_gelu_backward(ctx, dx.data(), x.data(), g.data(), n, static_cast<nfn_dtype>(7)),
                 "gelu_backward", "unknown dtype");
  expect_invalid(ctx, nfn_residual_forward(ctx, out.data(), r.data(), in.data(), nullptr, N, 0, NFN_F32),
                 "residual_forward", "C=0");
  check_relu_squared(ctx);
  check_swiglu(ctx);
  check_softcap(ctx);
  nfn_ctx_destroy(ctx);
  return finish("activation_test");
}
