// adamw_step_many against a double-precision AdamW written here: several steps, two groups
// with and without weight decay, clipping on and off, and the bf16 param copy.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

struct RefAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& grad, double scale, int t, double lr, double b1, double b2, double eps,
            double wd) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] * scale;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * p[i]);
    }
  }
};

static double sumsq(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (float x : a) s += static_cast<double>(x) * x;
  for (float x : b) s += static_cast<double>(x) * x;
  return s;
}

static void run(nfn_ctx* ctx, float max_norm) {
  const size_t n0 = 40000, n1 = 33;  // one group big enough to be threaded
  std::vector<float> p0 = random_vec(n0, 1), p1 = random_vec(n1, 2), m0(n0, 0.f), v0(n0, 0.f), m1(n1, 0.f),
                     v1(n1, 0.f);
  RefAdamW r0{{p0.begin(), p0.end()}, std::vector<double>(n0), std::vector<double>(n0)};
  RefAdamW r1{{p1.begin(), p1.end()}, std::vector<double>(n1), std::vector<double>(n1)};
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> g0 = random_vec(n0, 10 + step, 0.05f), g1 = random_vec(n1, 20 + step, 3.f);
    float ss = static_cast<float>(sumsq(g0, g1));
    nfn_adamw_group groups[2] = {{p0.data(), nullptr, g0.data(), m0.data(), v0.data(), n0, 0.1f},
                                 {p1.data(), nullptr, g1.data(), m1.data(), v1.data(), n1, 0.f}};
    EXPECT(nfn_adamw_step_many(ctx, groups, 2, step, lr, b1, b2, eps, &ss, max_norm, NFN_F32) == NFN_OK,
           "adamw_step_many");
    double norm = std::sqrt(sumsq(g0, g1));
    double scale = max_norm > 0 && norm > max_norm ? max_norm / norm : 1.0;
    r0.step(g0, scale, step, lr, b1, b2, eps, 0.1);
    r1.step(g1, scale, step, lr, b1, b2, eps, 0.0);
  }
  expect_close("adamw group 0 params", p0, r0.p, 1e-6, 1e-5);
  expect_close("adamw group 1 params", p1, r1.p, 1e-6, 1e-5);
  expect_close("adamw group 0 m", m0, r0.m, 1e-7, 1e-5);
  expect_close("adamw group 1 v", v1, r1.v, 1e-7, 1e-5);
}

static void test_bf16(nfn_ctx* ctx) {
  const size_t n = 257;
  std::vector<float> master = random_vec(n, 3), m(n, 0.f), v(n, 0.f), gf = random_vec(n, 4);
  std::vector<uint16_t> grad(n), param(n);
  EXPECT(nfn_convert(ctx, grad.data(), NFN_BF16, gf.data(), NFN_F32, n) == NFN_OK, "convert");
  std::vector<float> gq(n);  // the gradient as the op sees it
  EXPECT(nfn_convert(ctx, gq.data(), NFN_F32, grad.data(), NFN_BF16, n) == NFN_OK, "convert");
  RefAdamW r{{master.begin(), master.end()}, std::vector<double>(n), std::vector<double>(n)};
  nfn_adamw_group g = {master.data(), param.data(), grad.data(), m.data(), v.data(), n, 0.1f};
  EXPECT(nfn_adamw_step_many(ctx, &g, 1, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, nullptr, 0.f, NFN_BF16) == NFN_OK,
         "adamw bf16");
  r.step(gq, 1.0, 1, 1e-3, 0.9, 0.999, 1e-8, 0.1);
  expect_close("adamw bf16 master", master, r.p, 1e-6, 1e-5);
  std::vector<uint16_t> want(n);
  EXPECT(nfn_convert(ctx, want.data(), NFN_BF16, master.data(), NFN_F32, n) == NFN_OK && want == param,
         "the bf16 param copy is the rounded master");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  run(ctx, 0.f);
  run(ctx, 1.f);  // the gradients' norm is well above 1: clipping is active
  test_bf16(ctx);
  float ss = 1.f;
  std::vector<float> buf(4);
  nfn_adamw_group g = {buf.data(), nullptr, nullptr, buf.data(), buf.data(), 4, 0.f};
  expect_invalid(ctx, nfn_adamw_step_many(ctx, &g, 1, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, &ss, 1.f, NFN_F32),
                 "adamw_step_many", "null grad");
  g.grad = buf.data();
  expect_invalid(ctx, nfn_adamw_step_many(ctx, &g, 1, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, &ss, 1.f, NFN_F32),
                 "adamw_step_many", "step 0");
  expect_invalid(ctx, nfn_adamw_step_many(ctx, &g, 1, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, nullptr, 1.f, NFN_F32),
                 "adamw_step_many", "clip without grad_sumsq");
  // eps 0 would turn a parameter whose gradient was always 0 into 0 / 0.
  expect_invalid(ctx, nfn_adamw_step_many(ctx, &g, 1, 1, 1e-3f, 0.9f, 0.95f, 0.f, &ss, 1.f, NFN_F32),
                 "adamw_step_many", "eps 0");
  nfn_ctx_destroy(ctx);
  return finish("optimizer_test");
}
