// head_rmsnorm_forward/backward (nanochat's QK-norm) on strided rows whose H heads of D channels
// are followed by channels the ops must not touch: the forward against a double reference, the
// backward against finite differences of the forward, both in place and out of place, and the
// argument checks.
#include <cmath>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

static const int N = 4, H = 3, D = 10, kPad = 5, kStride = H * D + kPad;
static const float kScale = 1.2f, kEps = 1e-6f;

static bool in_head(size_t i) { return static_cast<int>(i % kStride) < H * D; }

// Rows of random values; head 1 of row 2 is small enough (mean square near 1e-6) that eps shows.
static std::vector<float> strided_input(unsigned seed) {
  std::vector<float> x = random_vec(N * kStride, seed, 1.5f);
  for (int c = 0; c < D; ++c) x[2 * kStride + D + c] *= 1e-3f;
  return x;
}

// out and rstd in double: out only at head channels (elsewhere NaN, never compared).
static void reference(const std::vector<float>& x, std::vector<double>* out, std::vector<double>* rstd) {
  out->assign(x.size(), NAN), rstd->assign(N * H, 0.0);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      const size_t o = static_cast<size_t>(n) * kStride + h * D;
      double ss = 0;
      for (int c = 0; c < D; ++c) ss += static_cast<double>(x[o + c]) * x[o + c];
      const double r = 1.0 / std::sqrt(ss / D + kEps);
      (*rstd)[n * H + h] = r;
      for (int c = 0; c < D; ++c) (*out)[o + c] = x[o + c] * r * kScale;
    }
}

// got's head channels against want's; every other channel bit-identical to `kept`.
static void expect_heads(const char* what, const std::vector<float>& got, const std::vector<double>& want,
                         const std::vector<float>& kept, double atol, double rtol) {
  std::vector<float> g;
  std::vector<double> w;
  bool untouched = true;
  for (size_t i = 0; i < got.size(); ++i) {
    if (in_head(i)) {
      g.push_back(got[i]), w.push_back(want[i]);
    } else {
      untouched = untouched && bits_of(got[i]) == bits_of(kept[i]);
    }
  }
  expect_close(what, g, w, atol, rtol);
  EXPECT(untouched, "%s: a channel outside the heads was written", what);
}

static void test_forward(nfn_ctx* ctx) {
  const std::vector<float> x = strided_input(11);
  std::vector<float> out = random_vec(x.size(), 12), rstd(N * H);
  const std::vector<float> before = out;
  EXPECT(nfn_head_rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), N, H, D, kStride, kScale, kEps, NFN_F32) ==
             NFN_OK, "head_rmsnorm_forward");
  std::vector<double> want, want_rstd;
  reference(x, &want, &want_rstd);
  expect_heads("head_rmsnorm_forward out", out, want, before, 1e-5, 1e-5);
  expect_close("head_rmsnorm_forward rstd", rstd, want_rstd, 1e-6, 1e-5);
  // In place: the same bits, and the channels after the heads keep the input's values.
  std::vector<float> inplace = x, rstd2(N * H);
  EXPECT(nfn_head_rmsnorm_forward(ctx, inplace.data(), rstd2.data(), inplace.data(), N, H, D, kStride, kScale, kEps,
                                  NFN_F32) == NFN_OK, "head_rmsnorm_forward in place");
  bool same = rstd2 == rstd;
  for (size_t i = 0; i < x.size(); ++i) same = same && bits_of(inplace[i]) == bits_of(in_head(i) ? out[i] : x[i]);
  EXPECT(same, "head_rmsnorm_forward in place differs from out of place");
}

// Central differences of sum(dout * out) over the heads, with out from the double reference,
// at every head channel of x; the step is 1e-3 of the channel's head scale (the small head's
// too), so the differences stay accurate there.
static std::vector<double> numeric_dinp(std::vector<float> x, const std::vector<float>& dout) {
  auto loss = [&] {
    std::vector<double> out, rstd;
    reference(x, &out, &rstd);
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += in_head(i) ? out[i] * dout[i] : 0.0;
    return s;
  };
  std::vector<double> g(x.size(), NAN);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!in_head(i)) continue;
    const bool small = i / kStride == 2 && static_cast<int>(i % kStride) / D == 1;
    const float keep = x[i], h = small ? 1e-6f : 1e-3f;
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (static_cast<double>(keep + h) - (keep - h));
  }
  return g;
}

static void test_backward(nfn_ctx* ctx) {
  const std::vector<float> x = strided_input(21), dout = random_vec(x.size(), 22);
  std::vector<float> out(x.size()), rstd(N * H);
  EXPECT(nfn_head_rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), N, H, D, kStride, kScale, kEps, NFN_F32) ==
             NFN_OK, "head_rmsnorm_forward");
  std::vector<float> dinp = random_vec(x.size(), 23);
  const std::vector<float> before = dinp;
  EXPECT(nfn_head_rmsnorm_backward(ctx, dinp.data(), dout.data(), out.data(), rstd.data(), N, H, D, kStride, kScale,
                                   NFN_F32) == NFN_OK, "head_rmsnorm_backward");
  // The small head's gradient is of order 1e3 (its r is): the relative tolerance carries it.
  expect_heads("head_rmsnorm_backward dinp", dinp, numeric_dinp(x, dout), before, 1e-4, 1e-3);
  // In place over dout, and from an output the forward wrote in place over x: the same bits.
  std::vector<float> y = x, rstd2(N * H), inplace = dout;
  EXPECT(nfn_head_rmsnorm_forward(ctx, y.data(), rstd2.data(), y.data(), N, H, D, kStride, kScale, kEps, NFN_F32) ==
             NFN_OK, "head_rmsnorm_forward in place");
  EXPECT(nfn_head_rmsnorm_backward(ctx, inplace.data(), inplace.data(), y.data(), rstd2.data(), N, H, D, kStride,
                                   kScale, NFN_F32) == NFN_OK, "head_rmsnorm_backward in place");
  bool same = true;
  for (size_t i = 0; i < x.size(); ++i) same = same && bits_of(inplace[i]) == bits_of(in_head(i) ? dinp[i] : dout[i]);
  EXPECT(same, "head_rmsnorm_backward in place differs from out of place");
}

static void test_bad_arguments(nfn_ctx* ctx) {
  std::vector<float> buf(N * kStride), stats(N * H);
  float *b = buf.data(), *st = stats.data();
  const char* fwd = "head_rmsnorm_forward";
  const char* bwd = "head_rmsnorm_backward";
  expect_invalid(ctx, nfn_head_rmsnorm_forward(ctx, b, st, b, N, H, D, H * D - 1, kScale, kEps, NFN_F32), fwd,
                 "stride below H*D");
  expect_invalid(ctx, nfn_head_rmsnorm_forward(ctx, b, st, b, N, H, 0, kStride, kScale, kEps, NFN_F32), fwd, "D=0");
  expect_invalid(ctx, nfn_head_rmsnorm_forward(ctx, b, nullptr, b, N, H, D, kStride, kScale, kEps, NFN_F32), fwd,
                 "null rstd");
  for (float eps : {0.f, -1.f, INFINITY, NAN})
    expect_invalid(ctx, nfn_head_rmsnorm_forward(ctx, b, st, b, N, H, D, kStride, kScale, eps, NFN_F32), fwd,
                   "eps not positive and finite");
  for (float scale : {0.f, INFINITY, NAN}) {
    expect_invalid(ctx, nfn_head_rmsnorm_forward(ctx, b, st, b, N, H, D, kStride, scale, kEps, NFN_F32), fwd,
                   "scale 0 or not finite");
    expect_invalid(ctx, nfn_head_rmsnorm_backward(ctx, b, b, b, st, N, H, D, kStride, scale, NFN_F32), bwd,
                   "scale 0 or not finite");
  }
  expect_invalid(ctx, nfn_head_rmsnorm_backward(ctx, b, b, nullptr, st, N, H, D, kStride, kScale, NFN_F32), bwd,
                 "null out");
  expect_invalid(ctx, nfn_head_rmsnorm_backward(ctx, b, b, b, st, 0, H, D, kStride, kScale, NFN_F32), bwd, "N=0");
  EXPECT(nfn_head_rmsnorm_forward(ctx, b, st, b, N, H, D, kStride, kScale, kEps, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "bf16 head_rmsnorm is unsupported on the CPU");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  test_forward(ctx);
  test_backward(ctx);
  test_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("head_rmsnorm_test");
}
