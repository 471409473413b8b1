// Causal attention: forward (out and lse) against a naive double softmax(QK^T)V with the
// causal mask, backward against finite differences over every element of qkv.
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

struct Geometry {
  int B, T, C, NH;
};

static void check(nfn_ctx* ctx, Geometry g, bool grad) {
  const int B = g.B, T = g.T, C = g.C, NH = g.NH, hs = C / NH;
  std::vector<float> qkv = random_vec(B * T * 3 * C, 11 + T, 1.f), out(B * T * C), lse(B * NH * T);
  auto forward = [&] {
    EXPECT(nfn_attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NFN_F32) == NFN_OK,
           "attention_forward");
  };
  forward();
  std::vector<double> want(B * T * C), want_lse(B * NH * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int c = 0; c < hs; ++c)
            d += static_cast<double>(qkv[(b * T + t) * 3 * C + h * hs + c]) * qkv[(b * T + j) * 3 * C + C + h * hs + c];
          s[j] = d / std::sqrt(static_cast<double>(hs));
          m = std::fmax(m, s[j]);
        }
        for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - m);
        want_lse[(b * NH + h) * T + t] = m + std::log(sum);
        for (int c = 0; c < hs; ++c) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += std::exp(s[j] - m) / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + c];
          want[(b * T + t) * C + h * hs + c] = o;
        }
      }
  char what[96];
  std::snprintf(what, sizeof what, "attention_forward B=%d T=%d C=%d NH=%d", B, T, C, NH);
  expect_close(what, out, want, 1e-5, 1e-4);
  expect_close("attention_forward lse", lse, want_lse, 1e-5, 1e-5);
  if (!grad) return;

  std::vector<float> gout = random_vec(B * T * C, 12), dqkv(qkv.size(), 123.f);  // overwritten
  EXPECT(nfn_attention_backward(ctx, dqkv.data(), gout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                                NFN_F32) == NFN_OK, "attention_backward");
  std::vector<double> num = numeric_grad(qkv, [&] { forward(); return weighted_sum(out, gout); }, 5e-3f);
  std::snprintf(what, sizeof what, "attention_backward B=%d T=%d C=%d NH=%d", B, T, C, NH);
  expect_close(what, dqkv, num, 2e-3, 1e-2);
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  check(ctx, {2, 5, 8, 2}, true);
  check(ctx, {1, 9, 12, 3}, true);
  check(ctx, {1, 1, 4, 1}, true);      // a single position attends to itself
  check(ctx, {1, 70, 8, 2}, true);     // longer than one block
  check(ctx, {1, 200, 128, 2}, false);  // the model's head size, several blocks
  std::vector<float> buf(1000);
  expect_invalid(ctx, nfn_attention_forward(ctx, buf.data(), buf.data(), buf.data(), 1, 4, 10, 3, NFN_F32),
                 "attention_forward", "C not a multiple of NH");
  expect_invalid(ctx, nfn_attention_backward(ctx, buf.data(), buf.data(), buf.data(), buf.data(), nullptr, 1, 4,
                                             8, 2, NFN_F32), "attention_backward", "null lse");
  EXPECT(nfn_attention_forward(ctx, buf.data(), buf.data(), buf.data(), 1, 4, 8, 2, NFN_BF16) ==
             NFN_ERR_UNSUPPORTED, "bf16 attention unsupported on the CPU");
  nfn_ctx_destroy(ctx);
  return finish("attention_test");
}
