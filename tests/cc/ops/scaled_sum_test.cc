// scaled_sum_forward and scaled_sum_backward against float64 references written here, in
// nanochat's two uses (r x + l x0 with learned r and l; the backout x - lam x_mid) and a general
// one; the backward also against central differences of a scalar loss; out aliasing x and y,
// dx aliasing dout; each of dx, dy, da, db left out alone; the same bits on a second run; bad
// arguments.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

namespace {

// One use of the op: the learned scalars (absent: NULL) and the host constants.
struct Mix {
  std::string name;
  bool has_a, has_b;
  float ca, cb;
};

struct Tensors {
  std::vector<float> x, y, a, b;
  const float* pa(const Mix& m) const { return m.has_a ? a.data() : nullptr; }
  const float* pb(const Mix& m) const { return m.has_b ? b.data() : nullptr; }
  double A(const Mix& m) const { return m.has_a ? a[0] : 1.0; }
  double B(const Mix& m) const { return m.has_b ? b[0] : 1.0; }
};

Tensors make(size_t n, unsigned seed) {
  return {random_vec(n, seed), random_vec(n, seed + 1), random_vec(1, seed + 2, 0.7f), random_vec(1, seed + 3, 0.7f)};
}

nfn_status forward(nfn_ctx* ctx, float* out, const Tensors& t, const Mix& m, size_t n) {
  return nfn_scaled_sum_forward(ctx, out, t.x.data(), t.y.data(), t.pa(m), t.pb(m), m.ca, m.cb, n, NFN_F32);
}

nfn_status backward(nfn_ctx* ctx, float* dx, float* dy, float* da, float* db, const float* dout, const Tensors& t,
                    const Mix& m, size_t n) {
  return nfn_scaled_sum_backward(ctx, dx, dy, da, db, dout, t.x.data(), t.y.data(), t.pa(m), t.pb(m), m.ca, m.cb, n,
                                 NFN_F32);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return false;
  return true;
}

// The forward against out = ca A x + cb B y in double, then in place over x and over y.
void check_forward(nfn_ctx* ctx, const Mix& m, size_t n) {
  const std::string name = "scaled_sum_forward " + m.name + " n" + std::to_string(n);
  const Tensors t = make(n, 30);
  std::vector<float> out(n, NAN);
  EXPECT(forward(ctx, out.data(), t, m, n) == NFN_OK, "%s: %s", name.c_str(), nfn_ctx_last_error(ctx));
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = m.ca * t.A(m) * t.x[i] + m.cb * t.B(m) * t.y[i];
  expect_close(name.c_str(), out, want, 1e-6, 1e-5);
  Tensors over_x = t, over_y = t;
  EXPECT(nfn_scaled_sum_forward(ctx, over_x.x.data(), over_x.x.data(), t.y.data(), t.pa(m), t.pb(m), m.ca, m.cb, n,
                                NFN_F32) == NFN_OK,
         "%s out = x", name.c_str());
  EXPECT(nfn_scaled_sum_forward(ctx, over_y.y.data(), t.x.data(), over_y.y.data(), t.pa(m), t.pb(m), m.ca, m.cb, n,
                                NFN_F32) == NFN_OK,
         "%s out = y", name.c_str());
  EXPECT(same_bits(over_x.x, out) && same_bits(over_y.y, out), "%s: out over x or y must give the same bits",
         name.c_str());
}

// The backward against its formula in double, from seeded dy, da and db (accumulated) and a
// dx full of NaN (overwritten); then dx over dout, each gradient alone, and a second run.
void check_backward(nfn_ctx* ctx, const Mix& m, size_t n) {
  const std::string name = "scaled_sum_backward " + m.name + " n" + std::to_string(n);
  const Tensors t = make(n, 40);
  const std::vector<float> g = random_vec(n, 44), dy0 = random_vec(n, 45), da0 = {0.25f}, db0 = {-1.5f};
  std::vector<float> dx(n, NAN), dy = dy0, da = da0, db = db0;
  EXPECT(backward(ctx, dx.data(), dy.data(), da.data(), db.data(), g.data(), t, m, n) == NFN_OK, "%s: %s",
         name.c_str(), nfn_ctx_last_error(ctx));
  std::vector<double> want_dx(n), want_dy(n);
  double sum_x = 0.0, sum_y = 0.0;
  for (size_t i = 0; i < n; ++i) {
    want_dx[i] = m.ca * t.A(m) * g[i];
    want_dy[i] = dy0[i] + m.cb * t.B(m) * g[i];
    sum_x += static_cast<double>(g[i]) * t.x[i];
    sum_y += static_cast<double>(g[i]) * t.y[i];
  }
  expect_close((name + " dx").c_str(), dx, want_dx, 1e-7, 1e-6);
  expect_close((name + " dy").c_str(), dy, want_dy, 1e-6, 1e-5);
  // f32 sums of n products: a few 1e-7 of the terms' magnitude sqrt(n) each
  const double atol = 1e-6 * std::sqrt(static_cast<double>(n));
  expect_close((name + " da").c_str(), da, {da0[0] + m.ca * sum_x}, atol, 1e-5);
  expect_close((name + " db").c_str(), db, {db0[0] + m.cb * sum_y}, atol, 1e-5);

  // dx written over dout: the same bits for every gradient.
  std::vector<float> over = g, dy2 = dy0, da2 = da0, db2 = db0;
  EXPECT(backward(ctx, over.data(), dy2.data(), da2.data(), db2.data(), over.data(), t, m, n) == NFN_OK,
         "%s dx = dout", name.c_str());
  EXPECT(same_bits(over, dx) && same_bits(dy2, dy) && same_bits(da2, da) && same_bits(db2, db),
         "%s: dx over dout must give the out-of-place bits", name.c_str());

  // Each gradient alone (the others NULL, and x or y NULL where its sum is not asked for).
  std::vector<float> only_dx(n, NAN), only_dy = dy0, only_da = da0, only_db = db0;
  EXPECT(nfn_scaled_sum_backward(ctx, only_dx.data(), nullptr, nullptr, nullptr, g.data(), nullptr, nullptr, t.pa(m),
                                 t.pb(m), m.ca, m.cb, n, NFN_F32) == NFN_OK,
         "%s dx alone", name.c_str());
  EXPECT(nfn_scaled_sum_backward(ctx, nullptr, only_dy.data(), nullptr, nullptr, g.data(), nullptr, nullptr, t.pa(m),
                                 t.pb(m), m.ca, m.cb, n, NFN_F32) == NFN_OK,
         "%s dy alone", name.c_str());
  EXPECT(nfn_scaled_sum_backward(ctx, nullptr, nullptr, only_da.data(), nullptr, g.data(), t.x.data(), nullptr,
                                 t.pa(m), t.pb(m), m.ca, m.cb, n, NFN_F32) == NFN_OK,
         "%s da alone", name.c_str());
  EXPECT(nfn_scaled_sum_backward(ctx, nullptr, nullptr, nullptr, only_db.data(), g.data(), nullptr, t.y.data(),
                                 t.pa(m), t.pb(m), m.ca, m.cb, n, NFN_F32) == NFN_OK,
         "%s db alone", name.c_str());
  EXPECT(same_bits(only_dx, dx) && same_bits(only_dy, dy) && same_bits(only_da, da) && same_bits(only_db, db),
         "%s: each gradient alone must give the bits it has with the others", name.c_str());

  // A second run from the same seeds: the same bits (the sums' order is fixed).
  std::vector<float> dx3(n, NAN), dy3 = dy0, da3 = da0, db3 = db0;
  EXPECT(backward(ctx, dx3.data(), dy3.data(), da3.data(), db3.data(), g.data(), t, m, n) == NFN_OK, "%s again",
         name.c_str());
  EXPECT(same_bits(dx3, dx) && same_bits(dy3, dy) && same_bits(da3, da) && same_bits(db3, db),
         "%s: a second run must give the same bits", name.c_str());
}

// The gradients of L = sum(w * out) with respect to x, y, a and b, by central differences
// (L is linear in each, so only the f32 rounding of out separates them), against the backward
// with dout = w from zeroed gradients.
void check_finite_differences(nfn_ctx* ctx, const Mix& m) {
  const size_t n = 37;
  const std::string name = "scaled_sum_backward " + m.name + " (finite differences)";
  Tensors t = make(n, 50);
  const std::vector<float> w = random_vec(n, 55);
  std::vector<float> out(n);
  auto loss = [&] {
    forward(ctx, out.data(), t, m, n);
    return weighted_sum(out, w);
  };
  const std::vector<double> num_x = numeric_grad(t.x, loss), num_y = numeric_grad(t.y, loss);
  const std::vector<double> num_a = numeric_grad(t.a, loss), num_b = numeric_grad(t.b, loss);
  std::vector<float> dx(n, NAN), dy(n, 0.f), da = {0.f}, db = {0.f};
  EXPECT(backward(ctx, dx.data(), dy.data(), da.data(), db.data(), w.data(), t, m, n) == NFN_OK, "%s", name.c_str());
  expect_close((name + " dx").c_str(), dx, num_x, 1e-4, 1e-3);
  expect_close((name + " dy").c_str(), dy, num_y, 1e-4, 1e-3);
  // Without a (b) the forward reads no A (B), so L does not move with it; da (db) is still
  // ca sum(w x) (cb sum(w y)), the gradient at A = 1.
  auto dot = [&](const std::vector<float>& v) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * v[i];
    return s;
  };
  expect_close((name + " da").c_str(), da, m.has_a ? num_a : std::vector<double>{m.ca * dot(t.x)}, 1e-4, 1e-3);
  expect_close((name + " db").c_str(), db, m.has_b ? num_b : std::vector<double>{m.cb * dot(t.y)}, 1e-4, 1e-3);
}

void check_bad_arguments(nfn_ctx* ctx) {
  std::vector<float> v(8, 1.f);
  float* p = v.data();
  expect_invalid(ctx, nfn_scaled_sum_forward(ctx, nullptr, p, p, nullptr, nullptr, 1.f, 1.f, 8, NFN_F32),
                 "scaled_sum_forward", "null out");
  expect_invalid(ctx, nfn_scaled_sum_forward(ctx, p, p, nullptr, nullptr, nullptr, 1.f, 1.f, 8, NFN_F32),
                 "scaled_sum_forward", "null y");
  expect_invalid(ctx, nfn_scaled_sum_forward(ctx, p, p, p, nullptr, nullptr, NAN, 1.f, 8, NFN_F32),
                 "scaled_sum_forward", "ca NaN");
  expect_invalid(ctx, nfn_scaled_sum_backward(ctx, p, p, p, p, nullptr, p, p, p, p, 1.f, 1.f, 8, NFN_F32),
                 "scaled_sum_backward", "null dout");
  expect_invalid(ctx, nfn_scaled_sum_backward(ctx, p, p, p, nullptr, p, nullptr, p, p, p, 1.f, 1.f, 8, NFN_F32),
                 "scaled_sum_backward", "da without x");
  EXPECT(std::string(nfn_ctx_last_error(ctx)) == "scaled_sum_backward: da needs x (null)", "message: %s",
         nfn_ctx_last_error(ctx));
  expect_invalid(ctx, nfn_scaled_sum_backward(ctx, p, p, nullptr, p, p, p, nullptr, p, p, 1.f, 1.f, 8, NFN_F32),
                 "scaled_sum_backward", "db without y");
  expect_invalid(ctx, nfn_scaled_sum_backward(ctx, p, p, p, p, p, p, p, p, p, 1.f, INFINITY, 8, NFN_F32),
                 "scaled_sum_backward", "cb inf");
  EXPECT(nfn_scaled_sum_forward(ctx, nullptr, nullptr, nullptr, nullptr, nullptr, 1.f, 1.f, 0, NFN_F32) == NFN_OK,
         "scaled_sum_forward: n = 0 does nothing");
  EXPECT(nfn_scaled_sum_forward(ctx, p, p, p, nullptr, nullptr, 1.f, 1.f, 8, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "scaled_sum_forward: bf16 storage is unsupported on the CPU");
  EXPECT(nfn_scaled_sum_backward(ctx, p, p, p, p, p, p, p, p, p, 1.f, 1.f, 8, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "scaled_sum_backward: bf16 storage is unsupported on the CPU");
}

}  // namespace

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  const Mix mixes[] = {{"r x + l x0", true, true, 1.f, 1.f},
                       {"backout x - lam x_mid", false, true, 1.f, -1.f},
                       {"general", true, true, 0.5f, 2.f},
                       {"a x + y", true, false, 1.f, 1.f}};
  for (const Mix& m : mixes) {
    for (size_t n : {size_t{37}, size_t{10007}}) {  // one chunk; several, on the threaded path
      check_forward(ctx, m, n);
      check_backward(ctx, m, n);
    }
    check_finite_differences(ctx, m);
  }
  check_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("scaled_sum_test");
}
