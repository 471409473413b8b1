// Causal attention with grouped-query heads and sliding windows: forward (out and lse) and
// backward (dqkv) against a naive double softmax(QK^T)V over each query's visible keys
// (written here: [t - W, t] under window W, query head h reading kv head h / (NH/NKV)),
// with its gradient derived by hand, and that gradient against finite differences over every
// element of qkv on small cases; a window of T or more gives the window-0 bits. In
// matmul=bf16 mode (where this CPU has it): forward against the same reference on
// bf16-rounded q, k and v, backward against the f32 path, and the same bits on any number of
// threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cc/util/bf16.h"
#include "tests/cc/ops/attention_shape.h"
#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

// Everything the reference computes, in double.
struct Reference {
  std::vector<double> out, lse, dqkv;
};

// out, lse and (with dout) dqkv in double from qkv as given. Query t of head h sees keys
// j in [lo, t], lo = max(0, t - W) (0 without a window), of kv head h / (NH / NKV).
static Reference reference(const std::vector<float>& qkv, AttentionShape g, const std::vector<float>* dout = nullptr) {
  const int B = g.B, T = g.T, NH = g.NH, HD = g.HD, group = g.NH / g.NKV;
  const size_t ld = g.row(), C = static_cast<size_t>(NH) * HD;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  Reference r;
  r.out.assign(g.out(), 0.0);
  r.lse.assign(g.lse(), 0.0);
  r.dqkv.assign(dout ? g.qkv() : 0, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int lo = g.W > 0 ? std::max(0, t - g.W) : 0, n = t + 1 - lo;
        const size_t qat = (b * T + t) * ld + h * HD, oat = (b * T + t) * C + h * HD;
        auto kat = [&](int j) { return (b * T + j) * ld + C + (h / group) * HD; };
        auto vat = [&](int j) { return kat(j) + static_cast<size_t>(g.NKV) * HD; };
        std::vector<double> s(n), p(n);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int c = 0; c < HD; ++c) d += static_cast<double>(qkv[qat + c]) * qkv[kat(lo + j) + c];
          s[j] = d * scale;
          m = std::fmax(m, s[j]);
        }
        for (int j = 0; j < n; ++j) sum += std::exp(s[j] - m);
        for (int j = 0; j < n; ++j) p[j] = std::exp(s[j] - m) / sum;
        r.lse[(b * NH + h) * T + t] = m + std::log(sum);
        for (int c = 0; c < HD; ++c)
          for (int j = 0; j < n; ++j) r.out[oat + c] += p[j] * qkv[vat(lo + j) + c];
        if (!dout) continue;
        // dP_j = dout . v_j, dS_j = P_j (dP_j - sum_i P_i dP_i); dq = scale dS K, dk_j += scale
        // dS_j q, dv_j += P_j dout (kv heads summed over their query heads).
        std::vector<double> dp(n);
        double D = 0;
        for (int j = 0; j < n; ++j) {
          for (int c = 0; c < HD; ++c) dp[j] += static_cast<double>((*dout)[oat + c]) * qkv[vat(lo + j) + c];
          D += p[j] * dp[j];
        }
        for (int j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - D) * scale;
          for (int c = 0; c < HD; ++c) {
            r.dqkv[qat + c] += ds * qkv[kat(lo + j) + c];
            r.dqkv[kat(lo + j) + c] += ds * qkv[qat + c];
            r.dqkv[vat(lo + j) + c] += p[j] * (*dout)[oat + c];
          }
        }
      }
  return r;
}

// Forward and backward against the reference; with `numeric`, the reference's gradient
// against finite differences of the op's own forward too (small cases: 2 forwards an element).
static void check(nfn_ctx* ctx, AttentionShape g, bool numeric) {
  const int B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HD = g.HD, W = g.W;
  std::vector<float> qkv = random_vec(g.qkv(), 11 + T + W, 1.f), out(g.out()), lse(g.lse());
  const std::vector<float> gout = random_vec(g.out(), 12);
  auto forward = [&] {
    EXPECT(nfn_attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HD, W, NFN_F32) == NFN_OK,
           "attention_forward%s: %s", g.name().c_str(), nfn_ctx_last_error(ctx));
  };
  forward();
  const Reference want = reference(qkv, g, &gout);
  const std::string what = g.name();
  expect_close(("attention_forward" + what).c_str(), out, want.out, 1e-5, 1e-4);
  expect_close(("attention_forward lse" + what).c_str(), lse, want.lse, 1e-5, 1e-5);

  std::vector<float> dqkv(qkv.size(), 123.f);  // overwritten
  EXPECT(nfn_attention_backward(ctx, dqkv.data(), gout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NKV, HD,
                                W, NFN_F32) == NFN_OK,
         "attention_backward%s: %s", what.c_str(), nfn_ctx_last_error(ctx));
  expect_close(("attention_backward" + what).c_str(), dqkv, want.dqkv, 1e-5, 1e-4);
  if (!numeric) return;
  const std::vector<double> num = numeric_grad(qkv, [&] { forward(); return weighted_sum(out, gout); }, 5e-3f);
  expect_close(("reference gradient vs finite differences" + what).c_str(),
               std::vector<float>(want.dqkv.begin(), want.dqkv.end()), num, 2e-3, 1e-2);
  expect_close(("attention_backward vs finite differences" + what).c_str(), dqkv, num, 2e-3, 1e-2);
}

// A window of T or more is no window: the same bits as window 0, forward and backward.
static void check_wide_window(nfn_ctx* ctx, AttentionShape g) {
  const int B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HD = g.HD;
  const std::vector<float> qkv = random_vec(g.qkv(), 31, 1.f), gout = random_vec(g.out(), 32);
  auto run = [&](int W, std::vector<float>* all) {
    std::vector<float> out(g.out()), lse(g.lse()), dqkv(g.qkv());
    EXPECT(nfn_attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HD, W, NFN_F32) == NFN_OK &&
               nfn_attention_backward(ctx, dqkv.data(), gout.data(), qkv.data(), out.data(), lse.data(), B, T, NH,
                                      NKV, HD, W, NFN_F32) == NFN_OK,
           "attention window=%d: %s", W, nfn_ctx_last_error(ctx));
    *all = out;
    all->insert(all->end(), lse.begin(), lse.end());
    all->insert(all->end(), dqkv.begin(), dqkv.end());
  };
  std::vector<float> none, at_t, past_t, narrower;
  run(0, &none);
  run(T, &at_t);
  run(T + 50, &past_t);
  run(T - 2, &narrower);
  EXPECT(std::memcmp(none.data(), at_t.data(), none.size() * 4) == 0 &&
             std::memcmp(none.data(), past_t.data(), none.size() * 4) == 0,
         "attention%s: windows T and T+50 differ from window 0", g.name().c_str());
  EXPECT(std::memcmp(none.data(), narrower.data(), none.size() * 4) != 0,
         "attention%s: window T-2 masks the last row's first keys, yet gives window 0's bits", g.name().c_str());
}

// The matmul=bf16 path on ctx (configured so), with the f32 path's context f32ctx.
static void check_bf16(nfn_ctx* ctx, nfn_ctx* f32ctx, AttentionShape g) {
  const int B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HD = g.HD, W = g.W;
  const std::vector<float> qkv = random_vec(g.qkv(), 21 + T, 1.f), gout = random_vec(g.out(), 22);
  auto run = [&](nfn_ctx* c, const char* threads, std::vector<float>* out, std::vector<float>* lse,
                 std::vector<float>* dqkv) {
    out->assign(g.out(), 7.f), lse->assign(g.lse(), 7.f), dqkv->assign(qkv.size(), 7.f);  // overwritten
    EXPECT(nfn_ctx_configure(c, "threads", threads) == NFN_OK, "threads=%s", threads);
    EXPECT(nfn_attention_forward(c, out->data(), lse->data(), qkv.data(), B, T, NH, NKV, HD, W, NFN_F32) == NFN_OK,
           "attention_forward: %s", nfn_ctx_last_error(c));
    EXPECT(nfn_attention_backward(c, dqkv->data(), gout.data(), qkv.data(), out->data(), lse->data(), B, T, NH, NKV,
                                  HD, W, NFN_F32) == NFN_OK, "attention_backward: %s", nfn_ctx_last_error(c));
  };
  std::vector<float> out, lse, dqkv, out3, lse3, dqkv3, out32, lse32, dqkv32;
  run(ctx, "1", &out, &lse, &dqkv);
  run(ctx, "3", &out3, &lse3, &dqkv3);
  run(f32ctx, "2", &out32, &lse32, &dqkv32);
  const std::string what = "matmul=bf16" + g.name();
  // The scores are products of the rounded q and k, accumulated in f32: lse is the rounded
  // inputs' to f32 precision. The output also rounds the probabilities (8 bits).
  std::vector<float> rounded = qkv;
  for (float& v : rounded) v = nfn::bf16_to_f32(nfn::f32_to_bf16(v));
  const Reference want = reference(rounded, g);
  expect_close((what + " forward (rounded reference)").c_str(), out, want.out, 1e-2, 1e-2);
  expect_close((what + " lse").c_str(), lse, want.lse, 1e-4, 1e-4);
  // The backward against the f32 path (itself held to the reference above).
  const std::vector<double> grad32(dqkv32.begin(), dqkv32.end());
  expect_close((what + " backward vs f32").c_str(), dqkv, grad32, 3e-2, 3e-2);
  double far = 0;
  for (size_t i = 0; i < dqkv.size(); ++i) far = std::fmax(far, std::fabs(dqkv[i] - dqkv32[i]));
  EXPECT(far > 1e-6, "%s: the bf16 path must round (max diff from f32 %g)", what.c_str(), far);
  EXPECT(std::memcmp(out.data(), out3.data(), out.size() * 4) == 0 &&
             std::memcmp(lse.data(), lse3.data(), lse.size() * 4) == 0 &&
             std::memcmp(dqkv.data(), dqkv3.data(), dqkv.size() * 4) == 0,
         "%s: 1 and 3 threads differ", what.c_str());
}

static void check_refusals(nfn_ctx* ctx) {
  std::vector<float> buf(4096);
  float* p = buf.data();
  auto forward = [&](int NH, int NKV, int HD, int W) {
    return nfn_attention_forward(ctx, p, p, p, 1, 4, NH, NKV, HD, W, NFN_F32);
  };
  expect_invalid(ctx, forward(3, 2, 4, 0), "attention_forward", "NKV not dividing NH");
  expect_invalid(ctx, forward(4, 0, 4, 0), "attention_forward", "NKV 0");
  expect_invalid(ctx, forward(4, 8, 4, 0), "attention_forward", "NKV above NH");
  expect_invalid(ctx, forward(4, 2, 0, 0), "attention_forward", "HD 0");
  expect_invalid(ctx, forward(4, 2, 4, -1), "attention_forward", "negative window");
  expect_invalid(ctx, nfn_attention_forward(ctx, p, p, p, 1, 0, 2, 2, 4, 0, NFN_F32), "attention_forward", "T 0");
  expect_invalid(ctx, nfn_attention_backward(ctx, p, p, p, p, nullptr, 1, 4, 2, 2, 4, 0, NFN_F32),
                 "attention_backward", "null lse");
  expect_invalid(ctx, nfn_attention_backward(ctx, p, p, p, p, p, 1, 4, 4, 3, 4, 0, NFN_F32), "attention_backward",
                 "NKV not dividing NH");
  expect_invalid(ctx, nfn_attention_backward(ctx, p, p, p, p, p, 1, 4, 2, 2, 4, -3, NFN_F32), "attention_backward",
                 "negative window");
  EXPECT(std::string(nfn_ctx_last_error(ctx)) ==
             "attention_backward: window=-3 must be 0 (every earlier position) or positive",
         "negative window message: %s", nfn_ctx_last_error(ctx));
  EXPECT(nfn_attention_forward(ctx, p, p, p, 1, 4, 2, 2, 4, 0, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "bf16 attention unsupported on the CPU");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  // Multi-head (NKV = NH), with finite differences on the small ones.
  check(ctx, {2, 5, 2, 2, 4, 0}, true);
  check(ctx, {1, 9, 3, 3, 4, 0}, true);
  check(ctx, {1, 1, 1, 1, 4, 0}, true);      // a single position attends to itself
  check(ctx, {1, 70, 2, 2, 4, 0}, true);     // longer than one tile
  check(ctx, {1, 200, 2, 2, 64, 0}, false);  // the model's head size, several tiles
  // Grouped-query heads (two and four query heads a kv head) and windows 1 and 3.
  check(ctx, {2, 7, 4, 2, 4, 0}, true);
  check(ctx, {1, 6, 4, 1, 3, 0}, true);
  check(ctx, {2, 7, 4, 2, 4, 1}, true);
  check(ctx, {1, 9, 4, 1, 4, 3}, true);
  check(ctx, {1, 8, 2, 2, 4, 3}, true);
  check(ctx, {1, 70, 4, 2, 4, 3}, true);  // windows inside one tile, past it
  // Several tiles: windows shorter than a tile, one tile exactly, and spanning tiles (a
  // tile's first key moves past 0), with each grouping.
  check(ctx, {2, 200, 4, 2, 16, 1}, false);
  check(ctx, {1, 200, 4, 1, 16, 63}, false);
  check(ctx, {1, 200, 4, 4, 16, 64}, false);
  check(ctx, {2, 150, 6, 3, 24, 70}, false);
  check(ctx, {1, 300, 8, 2, 32, 129}, false);
  check(ctx, {1, 30, 4, 2, 8, 30}, false);   // window T: no window
  check(ctx, {1, 30, 4, 2, 8, 500}, false);  // window past T
  check_wide_window(ctx, {2, 150, 4, 2, 16, 0});
  check_wide_window(ctx, {1, 20, 4, 1, 8, 0});
  check_refusals(ctx);
  nfn_ctx* bf16 = nullptr;
  EXPECT(nfn_ctx_create(0, &bf16) == NFN_OK, "second context");
  if (nfn_ctx_configure(bf16, "matmul", "bf16") == NFN_OK) {
    check_bf16(bf16, ctx, {2, 70, 2, 2, 4, 0});
    check_bf16(bf16, ctx, {1, 1, 1, 1, 4, 0});
    check_bf16(bf16, ctx, {2, 200, 2, 2, 64, 0});  // the model's head size, a partial last tile
    check_bf16(bf16, ctx, {1, 256, 4, 4, 64, 0});  // the trainer benchmark's head geometry
    check_bf16(bf16, ctx, {2, 200, 4, 2, 32, 0});   // grouped-query heads
    check_bf16(bf16, ctx, {1, 200, 4, 1, 32, 3});   // a window inside a tile
    check_bf16(bf16, ctx, {2, 200, 6, 2, 16, 70});  // a window across tiles
  } else {
    std::printf("note: matmul=bf16 unsupported here, not checked: %s\n", nfn_ctx_last_error(bf16));
  }
  nfn_ctx_destroy(bf16);
  nfn_ctx_destroy(ctx);
  return finish("attention_test");
}
