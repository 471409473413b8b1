// GELU and the residual add: forward against double references, GELU's backward against
// finite differences (also with dinp aliasing dout).
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
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
  nfn_ctx_destroy(ctx);
  return finish("activation_test");
}
