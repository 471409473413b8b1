// rope_forward and rope_backward against float64 references written here from each
// convention's own formula (Hugging Face llama's q * cos + rotate_half(q) * sin, nanochat's
// apply_rotary_emb), on fused grouped-query qkv rows with padding, at a KV-cache position
// offset; the backward against central finite differences and as the forward's inverse; in
// place against out of place; the channels the op must leave alone; bad arguments.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

namespace {

// A fused qkv activation: B*T rows of NH q heads, NKV k heads, NKV v heads and `pad` more
// channels, at positions pos_offset + t.
struct Layout {
  int B, T, NH, NKV, HD, pad, pos_offset;
  float theta;
  int rows() const { return B * T; }
  int stride() const { return (NH + 2 * NKV) * HD + pad; }
  size_t size() const { return static_cast<size_t>(rows()) * stride(); }
  bool rotated(size_t i) const { return static_cast<int>(i % stride()) < (NH + NKV) * HD; }
};

// The op's angle (nfn_ops.def): inv_freq and the angle rounded to f32, as Hugging Face and
// nanochat compute them in f32; the test takes cos and sin of it in double.
double angle(const Layout& L, int row, int j) {
  const float inv_freq = static_cast<float>(std::pow(static_cast<double>(L.theta), -2.0 * j / L.HD));
  const float t = static_cast<float>(row % L.T + L.pos_offset);
  return static_cast<double>(t * inv_freq);
}

// Hugging Face llama: q_embed = q * cos + rotate_half(q) * sin, with cos and sin of
// cat(freqs, freqs) over the head and rotate_half(x) = cat(-x2, x1). Other channels unchanged.
std::vector<double> reference_hf(const std::vector<float>& x, const Layout& L) {
  std::vector<double> y(x.begin(), x.end());
  const int half = L.HD / 2;
  for (int r = 0; r < L.rows(); ++r)
    for (int h = 0; h < L.NH + L.NKV; ++h) {
      const float* q = &x[static_cast<size_t>(r) * L.stride() + h * L.HD];
      double* out = &y[static_cast<size_t>(r) * L.stride() + h * L.HD];
      for (int i = 0; i < L.HD; ++i) {
        const double a = angle(L, r, i % half);
        const double rotate_half = i < half ? -static_cast<double>(q[i + half]) : q[i - half];
        out[i] = q[i] * std::cos(a) + rotate_half * std::sin(a);
      }
    }
  return y;
}

// nanochat (gpt.py apply_rotary_emb): x1, x2 = halves; y1 = x1 * cos + x2 * sin;
// y2 = x1 * (-sin) + x2 * cos. Other channels unchanged.
std::vector<double> reference_nanochat(const std::vector<float>& x, const Layout& L) {
  std::vector<double> y(x.begin(), x.end());
  const int d = L.HD / 2;
  for (int r = 0; r < L.rows(); ++r)
    for (int h = 0; h < L.NH + L.NKV; ++h) {
      const size_t head = static_cast<size_t>(r) * L.stride() + h * L.HD;
      for (int j = 0; j < d; ++j) {
        const double x1 = x[head + j], x2 = x[head + d + j], a = angle(L, r, j);
        y[head + j] = x1 * std::cos(a) + x2 * std::sin(a);
        y[head + d + j] = x1 * (-std::sin(a)) + x2 * std::cos(a);
      }
    }
  return y;
}

nfn_status forward(nfn_ctx* ctx, float* out, const float* inp, const Layout& L, int sign) {
  return nfn_rope_forward(ctx, out, inp, L.rows(), L.T, L.pos_offset, L.stride(), L.NH, L.NKV, L.HD, L.theta, sign,
                          NFN_F32);
}

nfn_status backward(nfn_ctx* ctx, float* dinp, const float* dout, const Layout& L, int sign) {
  return nfn_rope_backward(ctx, dinp, dout, L.rows(), L.T, L.pos_offset, L.stride(), L.NH, L.NKV, L.HD, L.theta,
                           sign, NFN_F32);
}

// The forward against the convention's reference out of place (v and padding of `out` keep
// the value they had) and in place (bitwise the same result, v and padding keep x's).
void check_forward(nfn_ctx* ctx, const Layout& L, int sign, const std::string& name) {
  const std::vector<float> x = random_vec(L.size(), 11 + sign, 1.f);
  std::vector<float> out(L.size(), 12345.f);
  EXPECT(forward(ctx, out.data(), x.data(), L, sign) == NFN_OK, "%s: %s", name.c_str(), nfn_ctx_last_error(ctx));
  std::vector<double> want = sign == 1 ? reference_hf(x, L) : reference_nanochat(x, L);
  // The op's cos and sin are within about an ulp of the double ones; the products are f32.
  expect_close((name + " rotated channels").c_str(), out, [&] {
    std::vector<double> w = want;
    for (size_t i = 0; i < w.size(); ++i)
      if (!L.rotated(i)) w[i] = 12345.0;
    return w;
  }(), 1e-6, 1e-5);
  std::vector<float> in_place = x;
  EXPECT(forward(ctx, in_place.data(), in_place.data(), L, sign) == NFN_OK, "%s in place", name.c_str());
  bool same = true;
  for (size_t i = 0; i < x.size(); ++i)
    same = same && bits_of(in_place[i]) == bits_of(L.rotated(i) ? out[i] : x[i]);
  EXPECT(same, "%s: in place must give the out-of-place bits and leave v and padding alone", name.c_str());
}

// The backward is the gradient of sum(w * forward(x)): against central differences (the op is
// linear, so they are exact but for f32 rounding of the outputs), and it undoes the forward.
void check_backward(nfn_ctx* ctx, const Layout& L, int sign, const std::string& name) {
  std::vector<float> x = random_vec(L.size(), 21, 1.f), w = random_vec(L.size(), 22, 1.f), y(L.size(), 0.f);
  auto loss = [&] {
    forward(ctx, y.data(), x.data(), L, sign);
    return weighted_sum(y, w);
  };
  const std::vector<double> numeric = numeric_grad(x, loss);
  std::vector<float> dx(L.size(), 0.f);
  EXPECT(backward(ctx, dx.data(), w.data(), L, sign) == NFN_OK, "%s backward", name.c_str());
  expect_close((name + " backward").c_str(), dx, numeric, 1e-4, 1e-3);
  std::vector<float> round_trip = x;  // v and padding are not rotated: they stay x's
  EXPECT(forward(ctx, round_trip.data(), x.data(), L, sign) == NFN_OK, "%s forward", name.c_str());
  EXPECT(backward(ctx, round_trip.data(), round_trip.data(), L, sign) == NFN_OK, "%s backward in place",
         name.c_str());
  std::vector<double> want(x.begin(), x.end());
  expect_close((name + " backward undoes the forward").c_str(), round_trip, want, 2e-6, 1e-5);
}

void check_bad_arguments(nfn_ctx* ctx) {
  const Layout L{1, 2, 4, 2, 8, 0, 0, 10000.f};
  std::vector<float> x(L.size());
  auto call = [&](int N, int T, int pos, int stride, int NH, int NKV, int HD, float theta, int sign) {
    return nfn_rope_forward(ctx, x.data(), x.data(), N, T, pos, stride, NH, NKV, HD, theta, sign, NFN_F32);
  };
  const int S = L.stride();
  expect_invalid(ctx, nfn_rope_forward(ctx, nullptr, x.data(), 2, 2, 0, S, 4, 2, 8, 1e4f, 1, NFN_F32),
                 "rope_forward", "null out");
  expect_invalid(ctx, nfn_rope_backward(ctx, x.data(), nullptr, 2, 2, 0, S, 4, 2, 8, 1e4f, 1, NFN_F32),
                 "rope_backward", "null dout");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 2, 7, 1e4f, 1), "rope_forward", "odd head dim");
  expect_invalid(ctx, call(2, 2, 0, 6 * 8 - 1, 4, 2, 8, 1e4f, 1), "rope_forward", "stride below the q and k heads");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 3, 8, 1e4f, 1), "rope_forward", "NKV not dividing NH");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 0, 8, 1e4f, 1), "rope_forward", "NKV = 0");
  expect_invalid(ctx, call(3, 2, 0, S, 4, 2, 8, 1e4f, 1), "rope_forward", "N not a multiple of T");
  expect_invalid(ctx, call(2, 2, -1, S, 4, 2, 8, 1e4f, 1), "rope_forward", "negative pos_offset");
  expect_invalid(ctx, call(2, 2, (1 << 24) - 1, S, 4, 2, 8, 1e4f, 1), "rope_forward", "positions past 2^24");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 2, 8, 0.f, 1), "rope_forward", "theta = 0");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 2, 8, NAN, 1), "rope_forward", "theta = NaN");
  expect_invalid(ctx, call(2, 2, 0, S, 4, 2, 8, 1e4f, 0), "rope_forward", "sign = 0");
  EXPECT(std::string(nfn_ctx_last_error(ctx)).find("sign=0 must be 1") != std::string::npos, "sign message: %s",
         nfn_ctx_last_error(ctx));
  EXPECT(nfn_rope_forward(ctx, x.data(), x.data(), 2, 2, 0, S, 4, 2, 8, 1e4f, 1, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "rope_forward: bf16 storage is unsupported on the CPU");
}

}  // namespace

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  // Grouped-query qkv (4 q heads, 2 k and 2 v heads) with 3 padding channels, at a KV-cache
  // offset, with llama's and nanochat's theta; one head of 2 channels at one position (T 1, a
  // decode step); positions near 2^24 (angles of 10^7 rad); and rows enough for the threaded
  // path.
  const Layout layouts[] = {{2, 5, 4, 2, 16, 3, 7, 10000.f},
                            {2, 5, 4, 2, 16, 3, 7, 100000.f},
                            {3, 1, 1, 1, 2, 0, 41, 10000.f},
                            {1, 3, 2, 1, 8, 0, (1 << 24) - 3, 500000.f},
                            {4, 64, 6, 2, 64, 0, 0, 10000.f}};
  for (const Layout& L : layouts)
    for (int sign : {1, -1}) {
      const std::string name = std::string(sign == 1 ? "rope hf" : "rope nanochat") + " HD" + std::to_string(L.HD) +
                               " pos" + std::to_string(L.pos_offset);
      check_forward(ctx, L, sign, name);
      if (L.size() < 4000) check_backward(ctx, L, sign, name);
    }
  check_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("rope_test");
}
