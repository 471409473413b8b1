// lm_head_cross_entropy and softmax_forward: losses against a naive double log-softmax,
// gradients (dx, dwte) against finite differences, masked rows, and several row chunks; the
// same with the logits soft-capped (nanochat's cap of 15, and 2, where tanh saturates), and with
// per-row weights (negative, zero and positive: RL's advantages), whose loss is sum w_i l_i.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

// Per-row losses in double: lse(l_i) - l_i[target] with l_i = x_i . wte, soft-capped to
// cap * tanh(l_i / cap) when cap > 0; 0 for masked rows.
static std::vector<double> ref_losses(const std::vector<float>& x, const std::vector<float>& wte,
                                      const std::vector<int32_t>& tgt, int N, int C, int V, double cap = 0) {
  std::vector<double> out(N, 0.0), logit(V);
  for (int i = 0; i < N; ++i) {
    if (tgt[i] < 0) continue;
    double m = -INFINITY, s = 0;
    for (int v = 0; v < V; ++v) {
      double d = 0;
      for (int c = 0; c < C; ++c) d += static_cast<double>(x[i * C + c]) * wte[v * C + c];
      logit[v] = cap > 0 ? cap * std::tanh(d / cap) : d;
      m = std::fmax(m, d);
    }
    for (int v = 0; v < V; ++v) s += std::exp(logit[v] - m);
    out[i] = m + std::log(s) - logit[tgt[i]];
  }
  return out;
}

// wte_scale sets the logits' size: about 1 at 0.5 (C = 5), past a cap of 2 at 3. weighted: each
// row's loss counts w_i times (w in [-1.5, 1.5], row 2's 0).
static void check(nfn_ctx* ctx, int N, int C, int V, int fd_samples, float cap = 0.f, float wte_scale = 0.5f,
                  bool weighted = false) {
  std::vector<float> x = random_vec(N * C, 21, 1.f), wte = random_vec(V * C, 22, wte_scale);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 7919) % V;
  tgt[1] = -1;  // masked rows
  tgt[N - 1] = -100;
  const float grad_scale = 1.f / N;
  std::vector<float> w(N, 1.f);
  if (weighted) {
    w = random_vec(N, 23, 1.5f);
    w[2] = 0.f;
  }
  std::vector<float> losses(N, -1.f), dx(N * C, 99.f), dwte(V * C, 0.25f);
  float loss_sum = 2.f;  // accumulated into
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses.data(), &loss_sum, dx.data(), dwte.data(), x.data(), wte.data(),
                                   tgt.data(), weighted ? w.data() : nullptr, N, C, V, V, grad_scale, cap,
                                   NFN_F32) == NFN_OK,
         "lm_head_cross_entropy");
  std::vector<double> want = ref_losses(x, wte, tgt, N, C, V, cap);  // unweighted, whatever the weights
  double want_sum = 2.0;
  for (int i = 0; i < N; ++i) want_sum += static_cast<double>(w[i]) * want[i];
  char what[112];
  std::snprintf(what, sizeof what, "lm_head losses N=%d C=%d V=%d softcap=%g%s", N, C, V, static_cast<double>(cap),
                weighted ? " weighted" : "");
  expect_close(what, losses, want, 1e-5, 1e-5);
  EXPECT(std::fabs(loss_sum - want_sum) <= 1e-5 * std::fabs(want_sum) + 1e-5, "loss_sum %g vs %g", loss_sum,
         want_sum);
  for (int c = 0; c < C; ++c) EXPECT(dx[C + c] == 0.f, "masked row must get a zero dx");
  if (weighted)
    for (int c = 0; c < C; ++c) EXPECT(dx[2 * C + c] == 0.f, "a row of weight 0 must get a zero dx");

  // The loss the gradients belong to: grad_scale * the weighted sum of the unmasked losses.
  auto loss = [&] {
    std::vector<double> l = ref_losses(x, wte, tgt, N, C, V, cap);
    double s = 0;
    for (int i = 0; i < N; ++i) s += static_cast<double>(w[i]) * l[i];
    return s * grad_scale;
  };
  // Finite differences on a sample of elements (every element when fd_samples <= 0).
  auto sampled = [&](std::vector<float>& p, const std::vector<float>& got, double offset, const char* name) {
    std::mt19937 rng(5);
    const int count = fd_samples > 0 ? fd_samples : static_cast<int>(p.size());
    for (int s = 0; s < count; ++s) {
      const size_t i = fd_samples > 0 ? rng() % p.size() : s;
      const float keep = p[i];
      p[i] = keep + 1e-3f;
      double up = loss();
      p[i] = keep - 1e-3f;
      double down = loss();
      p[i] = keep;
      double g = (up - down) / 2e-3 + offset;
      EXPECT(std::fabs(got[i] - g) <= 1e-4 + 1e-3 * std::fabs(g), "%s[%zu] %g vs numeric %g (softcap %g)", name, i,
             got[i], g, static_cast<double>(cap));
    }
  };
  sampled(x, dx, 0.0, "dx");
  sampled(wte, dwte, 0.25, "dwte (accumulated)");

  // Forward only: no gradients touched, losses identical.
  std::vector<float> losses2(N);
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses2.data(), nullptr, nullptr, nullptr, x.data(), wte.data(), tgt.data(), nullptr,
                                   N, C, V, V, 1.f, cap, NFN_F32) == NFN_OK && losses2 == losses,
         "forward-only losses");
  if (cap > 0.f) {  // the cap is really there: capped logits lie in (-cap, cap), so no row's loss reaches this
    for (int i = 0; i < N; ++i)
      EXPECT(losses[i] < std::log(static_cast<double>(V)) + 2.0 * cap, "capped loss %g at row %d", losses[i], i);
  }
}

// matmul=bf16 (where this CPU has it): losses equal the double reference on bf16-rounded
// x and wte, since only the GEMM inputs are rounded; the gradient stays near the f32 one.
static void test_bf16_mode(nfn_ctx* ctx) {
  if (nfn_ctx_configure(ctx, "matmul", "bf16") != NFN_OK) {
    std::printf("note: matmul=bf16 unsupported here, not checked: %s\n", nfn_ctx_last_error(ctx));
    return;
  }
  const int N = 40, C = 16, V = 500;
  std::vector<float> x = random_vec(N * C, 41), wte = random_vec(V * C, 42, 0.5f), losses(N), dx(N * C);
  std::vector<float> dwte(V * C, 0.f), xr(N * C), wr(V * C), dx32(N * C), dwte32(V * C, 0.f), losses32(N);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 37) % V;
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses.data(), nullptr, dx.data(), dwte.data(), x.data(), wte.data(),
                                   tgt.data(), nullptr, N, C, V, V, 1.f, 0.f, NFN_F32) == NFN_OK, "bf16 mode lm head");
  std::vector<uint16_t> half(V * C);
  nfn_convert(ctx, half.data(), NFN_BF16, x.data(), NFN_F32, N * C);
  nfn_convert(ctx, xr.data(), NFN_F32, half.data(), NFN_BF16, N * C);
  nfn_convert(ctx, half.data(), NFN_BF16, wte.data(), NFN_F32, V * C);
  nfn_convert(ctx, wr.data(), NFN_F32, half.data(), NFN_BF16, V * C);
  expect_close("lm_head losses, matmul=bf16", losses, ref_losses(xr, wr, tgt, N, C, V), 1e-4, 1e-4);
  EXPECT(nfn_ctx_configure(ctx, "matmul", "f32") == NFN_OK, "back to f32");
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses32.data(), nullptr, dx32.data(), dwte32.data(), x.data(), wte.data(),
                                   tgt.data(), nullptr, N, C, V, V, 1.f, 0.f, NFN_F32) == NFN_OK, "f32 lm head");
  std::vector<double> dx_ref(dx32.begin(), dx32.end()), dwte_ref(dwte32.begin(), dwte32.end());
  expect_close("lm_head dx, matmul=bf16 vs f32", dx, dx_ref, 3e-2, 3e-2);
  expect_close("lm_head dwte, matmul=bf16 vs f32", dwte, dwte_ref, 3e-2, 3e-2);
}

// A padded vocabulary (Vp > V rows of wte and dwte): the same losses and dx as the
// unpadded call on wte's first V rows, and dwte's padded rows left as they were.
static void test_padded_vocab(nfn_ctx* ctx, float cap) {
  const int N = 12, C = 8, V = 37, Vp = 48;
  std::vector<float> x = random_vec(N * C, 51), wte = random_vec(Vp * C, 52, 0.5f);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 11) % V;
  tgt[3] = -1;
  std::vector<float> losses(N), dx(N * C), dwte = random_vec(Vp * C, 53, 0.1f);
  std::vector<float> losses_v(N), dx_v(N * C), dwte_v(dwte.begin(), dwte.begin() + V * C);
  const std::vector<float> dwte_before = dwte;
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses.data(), nullptr, dx.data(), dwte.data(), x.data(), wte.data(),
                                   tgt.data(), nullptr, N, C, V, Vp, 0.5f, cap, NFN_F32) == NFN_OK, "padded lm head");
  EXPECT(nfn_lm_head_cross_entropy(ctx, losses_v.data(), nullptr, dx_v.data(), dwte_v.data(), x.data(), wte.data(),
                                   tgt.data(), nullptr, N, C, V, V, 0.5f, cap, NFN_F32) == NFN_OK, "unpadded lm head");
  EXPECT(losses == losses_v, "a padded vocabulary changed the losses");
  EXPECT(dx == dx_v, "a padded vocabulary changed dx");
  EXPECT(std::equal(dwte_v.begin(), dwte_v.end(), dwte.begin()), "a padded vocabulary changed dwte's first V rows");
  EXPECT(std::equal(dwte.begin() + V * C, dwte.end(), dwte_before.begin() + V * C),
         "dwte's padded rows must get no gradient");
}

static void test_softmax(nfn_ctx* ctx) {
  const int N = 4, V = 10, stride = 13;
  std::vector<float> x = random_vec(N * stride, 31, 4.f), y(N * V);
  x[5] = 80.f;  // large logits must not overflow
  EXPECT(nfn_softmax_forward(ctx, y.data(), x.data(), N, V, stride, NFN_F32) == NFN_OK, "softmax_forward");
  std::vector<double> want(N * V);
  for (int i = 0; i < N; ++i) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; ++j) m = std::fmax(m, x[i * stride + j]);
    for (int j = 0; j < V; ++j) s += std::exp(x[i * stride + j] - m);
    for (int j = 0; j < V; ++j) want[i * V + j] = std::exp(x[i * stride + j] - m) / s;
  }
  expect_close("softmax_forward", y, want, 1e-7, 1e-5);
  expect_invalid(ctx, nfn_softmax_forward(ctx, y.data(), x.data(), N, V, V - 1, NFN_F32), "softmax_forward",
                 "stride < V");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  check(ctx, 6, 5, 11, 0);        // tiny: every element checked
  check(ctx, 150, 4, 32768, 6);   // 64-row chunks: three of them, the last partial
  check(ctx, 6, 5, 11, 0, 15.f);   // nanochat's cap, logits well inside it
  check(ctx, 6, 5, 11, 0, 2.f, 3.f);  // logits past the cap: tanh saturates
  check(ctx, 150, 4, 32768, 4, 2.f, 3.f);
  check(ctx, 6, 5, 11, 0, 0.f, 0.5f, true);  // per-row weights: the weighted loss's gradients
  check(ctx, 6, 5, 11, 0, 15.f, 0.5f, true);
  check(ctx, 150, 4, 32768, 6, 0.f, 0.5f, true);
  test_padded_vocab(ctx, 0.f);
  test_padded_vocab(ctx, 15.f);
  test_softmax(ctx);
  test_bf16_mode(ctx);
  {  // A masked row gets exact zeros whatever its logits: here they overflow to inf.
    const int N = 2, C = 3, V = 4;
    std::vector<float> x = {3e38f, 3e38f, 3e38f, 0.1f, 0.2f, 0.3f}, wte = random_vec(V * C, 7, 1.f);
    for (float& w : wte) w = std::fabs(w) + 1.f;
    std::vector<int32_t> tgt = {-1, 2};
    std::vector<float> losses(N, -1.f), dx(N * C, 99.f), dwte(V * C, 0.f);
    EXPECT(nfn_lm_head_cross_entropy(ctx, losses.data(), nullptr, dx.data(), dwte.data(), x.data(), wte.data(),
                                     tgt.data(), nullptr, N, C, V, V, 1.f, 0.f, NFN_F32) == NFN_OK, "masked non-finite row");
    EXPECT(losses[0] == 0.f && std::isfinite(losses[1]), "losses %g %g", losses[0], losses[1]);
    for (int c = 0; c < C; ++c) EXPECT(dx[c] == 0.f && std::isfinite(dx[C + c]), "dx[%d] %g %g", c, dx[c], dx[C + c]);
    for (float d : dwte) EXPECT(std::isfinite(d), "dwte holds %g", d);
  }
  std::vector<float> buf(64);
  std::vector<int32_t> tgt = {0, 3, 9};
  expect_invalid(ctx, nfn_lm_head_cross_entropy(ctx, nullptr, nullptr, nullptr, nullptr, buf.data(), buf.data(),
                                                tgt.data(), nullptr, 3, 2, 5, 5, 1.f, 0.f, NFN_F32),
                 "lm_head_cross_entropy", "target >= V");
  expect_invalid(ctx, nfn_lm_head_cross_entropy(ctx, nullptr, nullptr, nullptr, nullptr, buf.data(), buf.data(),
                                                tgt.data(), nullptr, 3, 2, 10, 9, 1.f, 0.f, NFN_F32),
                 "lm_head_cross_entropy", "Vp < V");
  expect_invalid(ctx, nfn_lm_head_cross_entropy(ctx, nullptr, nullptr, nullptr, buf.data(), buf.data(), buf.data(),
                                                tgt.data(), nullptr, 3, 2, 10, 10, 1.f, 0.f, NFN_F32),
                 "lm_head_cross_entropy", "dwte without dx");
  for (float cap : {-1.f, NAN, INFINITY})
    expect_invalid(ctx, nfn_lm_head_cross_entropy(ctx, nullptr, nullptr, nullptr, nullptr, buf.data(), buf.data(),
                                                  tgt.data(), nullptr, 3, 2, 10, 10, 1.f, cap, NFN_F32),
                   "lm_head_cross_entropy", "softcap negative or not finite");
  nfn_ctx_destroy(ctx);
  return finish("loss_test");
}
