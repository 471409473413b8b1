// Causal attention: forward (out and lse) against a naive double softmax(QK^T)V with the
// causal mask, backward against finite differences over every element of qkv; in
// matmul=bf16 mode (where this CPU has it) forward against the same reference on
// bf16-rounded q, k and v, backward against the f32 path, and the same bits on any number of
// threads.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cc/util/bf16.h"
#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

struct Geometry {
  int B, T, C, NH;
};

// out and lse in double, from qkv as given.
static void reference(const std::vector<float>& qkv, Geometry g, std::vector<double>* want,
                      std::vector<double>* want_lse) {
  const int B = g.B, T = g.T, C = g.C, NH = g.NH, hs = C / NH;
  want->assign(B * T * C, 0.0);
  want_lse->assign(B * NH * T, 0.0);
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
        (*want_lse)[(b * NH + h) * T + t] = m + std::log(sum);
        for (int c = 0; c < hs; ++c) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += std::exp(s[j] - m) / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + c];
          (*want)[(b * T + t) * C + h * hs + c] = o;
        }
      }
}

static void check(nfn_ctx* ctx, Geometry g, bool grad) {
  const int B = g.B, T = g.T, C = g.C, NH = g.NH;
  std::vector<float> qkv = random_vec(B * T * 3 * C, 11 + T, 1.f), out(B * T * C), lse(B * NH * T);
  auto forward = [&] {
    EXPECT(nfn_attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NFN_F32) == NFN_OK,
           "attention_forward");
  };
  forward();
  std::vector<double> want, want_lse;
  reference(qkv, g, &want, &want_lse);
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

// The matmul=bf16 path on ctx (configured so), with the f32 path's context f32ctx.
static void check_bf16(nfn_ctx* ctx, nfn_ctx* f32ctx, Geometry g) {
  const int B = g.B, T = g.T, C = g.C, NH = g.NH;
  const std::vector<float> qkv = random_vec(B * T * 3 * C, 21 + T, 1.f), gout = random_vec(B * T * C, 22);
  auto run = [&](nfn_ctx* c, const char* threads, std::vector<float>* out, std::vector<float>* lse,
                 std::vector<float>* dqkv) {
    out->assign(B * T * C, 7.f), lse->assign(B * NH * T, 7.f), dqkv->assign(qkv.size(), 7.f);  // overwritten
    EXPECT(nfn_ctx_configure(c, "threads", threads) == NFN_OK, "threads=%s", threads);
    EXPECT(nfn_attention_forward(c, out->data(), lse->data(), qkv.data(), B, T, C, NH, NFN_F32) == NFN_OK,
           "attention_forward: %s", nfn_ctx_last_error(c));
    EXPECT(nfn_attention_backward(c, dqkv->data(), gout.data(), qkv.data(), out->data(), lse->data(), B, T, C, NH,
                                  NFN_F32) == NFN_OK, "attention_backward: %s", nfn_ctx_last_error(c));
  };
  std::vector<float> out, lse, dqkv, out3, lse3, dqkv3, out32, lse32, dqkv32;
  run(ctx, "1", &out, &lse, &dqkv);
  run(ctx, "3", &out3, &lse3, &dqkv3);
  run(f32ctx, "2", &out32, &lse32, &dqkv32);
  char what[128];
  std::snprintf(what, sizeof what, "matmul=bf16 B=%d T=%d C=%d NH=%d", B, T, C, NH);
  // The scores are products of the rounded q and k, accumulated in f32: lse is the rounded
  // inputs' to f32 precision. The output also rounds the probabilities (8 bits).
  std::vector<float> rounded = qkv;
  for (float& v : rounded) v = nfn::bf16_to_f32(nfn::f32_to_bf16(v));
  std::vector<double> want, want_lse;
  reference(rounded, g, &want, &want_lse);
  std::string tag = std::string(what) + " forward (rounded reference)";
  expect_close(tag.c_str(), out, want, 1e-2, 1e-2);
  tag = std::string(what) + " lse";
  expect_close(tag.c_str(), lse, want_lse, 1e-4, 1e-4);
  // The backward against the f32 path (itself held to finite differences above).
  std::vector<double> grad32(dqkv32.begin(), dqkv32.end());
  tag = std::string(what) + " backward vs f32";
  expect_close(tag.c_str(), dqkv, grad32, 3e-2, 3e-2);
  double far = 0;
  for (size_t i = 0; i < dqkv.size(); ++i) far = std::fmax(far, std::fabs(dqkv[i] - dqkv32[i]));
  EXPECT(far > 1e-6, "%s: the bf16 path must round (max diff from f32 %g)", what, far);
  EXPECT(std::memcmp(out.data(), out3.data(), out.size() * 4) == 0 &&
             std::memcmp(lse.data(), lse3.data(), lse.size() * 4) == 0 &&
             std::memcmp(dqkv.data(), dqkv3.data(), dqkv.size() * 4) == 0,
         "%s: 1 and 3 threads differ", what);
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
  nfn_ctx* bf16 = nullptr;
  EXPECT(nfn_ctx_create(0, &bf16) == NFN_OK, "second context");
  if (nfn_ctx_configure(bf16, "matmul", "bf16") == NFN_OK) {
    check_bf16(bf16, ctx, {2, 70, 8, 2});
    check_bf16(bf16, ctx, {1, 1, 4, 1});
    check_bf16(bf16, ctx, {2, 200, 128, 2});  // the model's head size, a partial last tile
    check_bf16(bf16, ctx, {1, 256, 256, 4});  // the trainer benchmark's head geometry
  } else {
    std::printf("note: matmul=bf16 unsupported here, not checked: %s\n", nfn_ctx_last_error(bf16));
  }
  nfn_ctx_destroy(bf16);
  nfn_ctx_destroy(ctx);
  return finish("attention_test");
}
