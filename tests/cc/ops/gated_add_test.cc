// gated_add_forward and gated_add_backward against float64 references written here from the
// formula in nfn_ops.def, in nanochat's two uses: value embeddings added into the v part of
// fused qkv rows (shift 0, no lambda, padded strides) and the smear of the previous token
// (shift 1 over several sequences, gin and add the same rows, so dgin and dadd one buffer);
// plus a gate wider than a warp and a shift over sequences of one row. The backward also
// against central differences of a scalar loss; rows and channels the op must leave alone;
// each gradient alone; the same bits on a second run; bad arguments.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

namespace {

struct Layout {
  std::string name;
  int B, T, H, D, G, shift;
  int out_stride, out_offset;  // out starts out_offset elements into its rows (qkv's v part)
  int gin_stride, add_stride;
  bool shared;   // gin and add are the same rows (the smear): one buffer, one stride
  bool has_lam;
  float scale;
  int N() const { return B * T; }
  size_t out_size() const { return static_cast<size_t>(N()) * out_stride; }
  size_t gin_size() const { return static_cast<size_t>(N()) * gin_stride; }
  size_t add_size() const { return static_cast<size_t>(N()) * add_stride; }
  bool adds(int n) const { return n % T >= shift; }
  // Whether element i of the out buffer is one the forward adds to.
  bool written(size_t i) const {
    const int n = static_cast<int>(i / out_stride), col = static_cast<int>(i % out_stride) - out_offset;
    return adds(n) && col >= 0 && col < H * D;
  }
};

// The op's inputs. In a shared layout `add` is unused: gin's buffer is both.
struct Inputs {
  std::vector<float> gin, w, lam, add;
  const float* add_ptr(const Layout& L) const { return L.shared ? gin.data() : add.data(); }
  const float* lam_ptr(const Layout& L) const { return L.has_lam ? lam.data() : nullptr; }
  double Lv(const Layout& L) const { return L.has_lam ? lam[0] : 1.0; }
};

Inputs make_inputs(const Layout& L, unsigned seed) {
  // w at 0.3 keeps z = gin . w near 1, where sigmoid's slope is not small
  return {random_vec(L.gin_size(), seed), random_vec(static_cast<size_t>(L.H) * L.G, seed + 1, 0.3f),
          random_vec(1, seed + 2, 0.8f), random_vec(L.shared ? 0 : L.add_size(), seed + 3)};
}

nfn_status forward(nfn_ctx* ctx, float* out_buf, const Inputs& in, const Layout& L) {
  return nfn_gated_add_forward(ctx, out_buf + L.out_offset, in.gin.data(), in.w.data(), in.lam_ptr(L),
                               in.add_ptr(L), L.N(), L.T, L.H, L.D, L.G, L.shift, L.out_stride, L.gin_stride,
                               L.add_stride, L.scale, NFN_F32);
}

nfn_status backward(nfn_ctx* ctx, float* dgin, float* dw, float* dlam, float* dadd, const float* dout_buf,
                    const Inputs& in, const Layout& L) {
  return nfn_gated_add_backward(ctx, dgin, dw, dlam, dadd, dout_buf + L.out_offset, in.gin.data(), in.w.data(),
                                in.lam_ptr(L), in.add_ptr(L), L.N(), L.T, L.H, L.D, L.G, L.shift, L.out_stride,
                                L.gin_stride, L.add_stride, L.scale, NFN_F32);
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

double gate_logit(const Layout& L, const Inputs& in, int n, int h) {
  double z = 0.0;
  for (int g = 0; g < L.G; ++g)
    z += static_cast<double>(in.gin[static_cast<size_t>(n) * L.gin_stride + g]) * in.w[h * L.G + g];
  return z;
}

// The add rows' element (row n's source row n - shift), head h, channel d.
size_t add_index(const Layout& L, int n, int h, int d) {
  return static_cast<size_t>(n - L.shift) * L.add_stride + h * L.D + d;
}
size_t out_index(const Layout& L, int n, int h, int d) {
  return static_cast<size_t>(n) * L.out_stride + L.out_offset + h * L.D + d;
}

std::vector<double> reference_forward(const Layout& L, const Inputs& in, const std::vector<float>& out0) {
  std::vector<double> y(out0.begin(), out0.end());
  const float* add = in.add_ptr(L);
  for (int n = 0; n < L.N(); ++n)
    for (int h = 0; h < L.H && L.adds(n); ++h) {
      const double c = L.scale * in.Lv(L) * sigmoid(gate_logit(L, in, n, h));
      for (int d = 0; d < L.D; ++d) y[out_index(L, n, h, d)] += c * add[add_index(L, n, h, d)];
    }
  return y;
}

// The gradients from seeds, as nfn_ops.def states them; in a shared layout dadd's terms land in
// dgin's buffer.
struct Grads {
  std::vector<double> dgin, dw, dlam, dadd;
};

Grads reference_backward(const Layout& L, const Inputs& in, const std::vector<float>& dout, const Grads& seed) {
  Grads r = seed;
  std::vector<double>& dadd = L.shared ? r.dgin : r.dadd;
  const float* add = in.add_ptr(L);
  for (int n = 0; n < L.N(); ++n)
    for (int h = 0; h < L.H && L.adds(n); ++h) {
      const double s = sigmoid(gate_logit(L, in, n, h)), c = L.scale * in.Lv(L) * s;
      double S = 0.0;
      for (int d = 0; d < L.D; ++d) {
        S += static_cast<double>(dout[out_index(L, n, h, d)]) * add[add_index(L, n, h, d)];
        dadd[add_index(L, n, h, d)] += c * dout[out_index(L, n, h, d)];
      }
      const double dz = S * L.scale * in.Lv(L) * s * (1.0 - s);
      for (int g = 0; g < L.G; ++g) {
        r.dgin[static_cast<size_t>(n) * L.gin_stride + g] += dz * in.w[h * L.G + g];
        r.dw[h * L.G + g] += dz * in.gin[static_cast<size_t>(n) * L.gin_stride + g];
      }
      r.dlam[0] += c / in.Lv(L) * S;
    }
  return r;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return false;
  return true;
}

// The forward against the reference; every element it must not write keeps its bits.
void check_forward(nfn_ctx* ctx, const Layout& L) {
  const std::string name = "gated_add_forward " + L.name;
  const Inputs in = make_inputs(L, 60);
  const std::vector<float> out0 = random_vec(L.out_size(), 64);
  std::vector<float> out = out0;
  EXPECT(forward(ctx, out.data(), in, L) == NFN_OK, "%s: %s", name.c_str(), nfn_ctx_last_error(ctx));
  expect_close(name.c_str(), out, reference_forward(L, in, out0), 1e-6, 1e-5);
  size_t moved = 0;
  for (size_t i = 0; i < out.size(); ++i) moved += !L.written(i) && bits_of(out[i]) != bits_of(out0[i]);
  EXPECT(moved == 0, "%s: %zu elements outside the added rows and heads changed", name.c_str(), moved);
}

// The backward against the reference from random seeds (all accumulated); each gradient alone
// and a second run give the same bits; in a shared layout, dgin and dadd in one call give the
// bits of dadd's call followed by dgin's.
void check_backward(nfn_ctx* ctx, const Layout& L) {
  const std::string name = "gated_add_backward " + L.name;
  const Inputs in = make_inputs(L, 70);
  const std::vector<float> dout = random_vec(L.out_size(), 74);
  const std::vector<float> dgin0 = random_vec(L.gin_size(), 75), dw0 = random_vec(in.w.size(), 76),
                           dlam0 = {0.5f}, dadd0 = random_vec(L.shared ? 0 : L.add_size(), 77);
  std::vector<float> dgin = dgin0, dw = dw0, dlam = dlam0, dadd = dadd0;
  float* dadd_ptr = L.shared ? dgin.data() : dadd.data();
  EXPECT(backward(ctx, dgin.data(), dw.data(), dlam.data(), dadd_ptr, dout.data(), in, L) == NFN_OK, "%s: %s",
         name.c_str(), nfn_ctx_last_error(ctx));
  const Grads want =
      reference_backward(L, in, dout, {as_double(dgin0), as_double(dw0), as_double(dlam0), as_double(dadd0)});
  expect_close((name + " dgin").c_str(), dgin, want.dgin, 1e-5, 1e-4);
  expect_close((name + " dw").c_str(), dw, want.dw, 1e-5, 1e-4);
  expect_close((name + " dlam").c_str(), dlam, want.dlam, 1e-5, 1e-4);
  if (!L.shared) expect_close((name + " dadd").c_str(), dadd, want.dadd, 1e-5, 1e-4);

  std::vector<float> again_gin = dgin0, again_w = dw0, again_lam = dlam0, again_add = dadd0;
  float* again_add_ptr = L.shared ? again_gin.data() : again_add.data();
  EXPECT(backward(ctx, again_gin.data(), again_w.data(), again_lam.data(), again_add_ptr, dout.data(), in, L) ==
             NFN_OK,
         "%s again", name.c_str());
  EXPECT(same_bits(again_gin, dgin) && same_bits(again_w, dw) && same_bits(again_lam, dlam) &&
             same_bits(again_add, dadd),
         "%s: a second run must give the same bits", name.c_str());

  std::vector<float> only_gin = dgin0, only_w = dw0, only_lam = dlam0, only_add = dadd0;
  float* only_add_ptr = L.shared ? only_gin.data() : only_add.data();
  // dadd's terms first, then dgin's: one call with both must give these bits.
  EXPECT(backward(ctx, nullptr, nullptr, nullptr, only_add_ptr, dout.data(), in, L) == NFN_OK, "%s dadd alone",
         name.c_str());
  EXPECT(backward(ctx, only_gin.data(), nullptr, nullptr, nullptr, dout.data(), in, L) == NFN_OK, "%s dgin alone",
         name.c_str());
  EXPECT(backward(ctx, nullptr, only_w.data(), nullptr, nullptr, dout.data(), in, L) == NFN_OK, "%s dw alone",
         name.c_str());
  EXPECT(backward(ctx, nullptr, nullptr, only_lam.data(), nullptr, dout.data(), in, L) == NFN_OK, "%s dlam alone",
         name.c_str());
  EXPECT(same_bits(only_gin, dgin) && same_bits(only_w, dw) && same_bits(only_lam, dlam) && same_bits(only_add, dadd),
         "%s: each gradient alone must give the bits it has with the others", name.c_str());
}

// Every gradient against central differences of L = sum(wt * out), out starting at 0, from
// zeroed gradients with dout = wt: with respect to gin's buffer (its channels past G and its
// rows the forward skips included: gradient 0), add's (the smear: the one buffer, through both
// uses), w and lam.
void check_finite_differences(nfn_ctx* ctx, const Layout& L) {
  const std::string name = "gated_add_backward " + L.name + " (finite differences)";
  Inputs in = make_inputs(L, 80);
  const std::vector<float> wt = random_vec(L.out_size(), 84);
  std::vector<float> out(L.out_size());
  auto loss = [&] {
    std::fill(out.begin(), out.end(), 0.f);
    forward(ctx, out.data(), in, L);
    return weighted_sum(out, wt);
  };
  const std::vector<double> num_gin = numeric_grad(in.gin, loss), num_w = numeric_grad(in.w, loss);
  const std::vector<double> num_lam = numeric_grad(in.lam, loss), num_add = numeric_grad(in.add, loss);
  std::vector<float> dgin(L.gin_size(), 0.f), dw(in.w.size(), 0.f), dlam = {0.f}, dadd(in.add.size(), 0.f);
  EXPECT(backward(ctx, dgin.data(), dw.data(), dlam.data(), L.shared ? dgin.data() : dadd.data(), wt.data(), in, L) ==
             NFN_OK,
         "%s", name.c_str());
  expect_close((name + " dgin").c_str(), dgin, num_gin, 1e-3, 1e-2);
  expect_close((name + " dw").c_str(), dw, num_w, 1e-3, 1e-2);
  if (!L.shared) expect_close((name + " dadd").c_str(), dadd, num_add, 1e-3, 1e-2);
  // Without lam the forward reads none (L = 1): dlam is then the reference's gradient at 1.
  const Grads zero{std::vector<double>(L.gin_size()), std::vector<double>(in.w.size()), {0.0},
                   std::vector<double>(in.add.size())};
  expect_close((name + " dlam").c_str(), dlam, L.has_lam ? num_lam : reference_backward(L, in, wt, zero).dlam, 1e-3,
               1e-2);
}

void check_bad_arguments(nfn_ctx* ctx) {
  std::vector<float> v(256, 1.f);
  float* p = v.data();
  // N T H D G shift out_stride gin_stride add_stride scale
  auto call = [&](int N, int T, int H, int D, int G, int shift, int os, int gs, int as, float scale) {
    return nfn_gated_add_forward(ctx, p, p, p, nullptr, p, N, T, H, D, G, shift, os, gs, as, scale, NFN_F32);
  };
  expect_invalid(ctx, call(4, 3, 2, 4, 3, 0, 8, 3, 8, 1.f), "gated_add_forward", "N not a multiple of T");
  expect_invalid(ctx, call(4, 2, 0, 4, 3, 0, 8, 3, 8, 1.f), "gated_add_forward", "H = 0");
  expect_invalid(ctx, call(4, 2, 2, 4, 3, 2, 8, 3, 8, 1.f), "gated_add_forward", "shift = 2");
  EXPECT(std::string(nfn_ctx_last_error(ctx)) == "gated_add_forward: shift=2 must be 0 or 1", "message: %s",
         nfn_ctx_last_error(ctx));
  expect_invalid(ctx, call(4, 2, 2, 4, 3, 0, 8, 2, 8, 1.f), "gated_add_forward", "gin_stride below G");
  expect_invalid(ctx, call(4, 2, 2, 4, 3, 0, 7, 3, 8, 1.f), "gated_add_forward", "out_stride below H*D");
  expect_invalid(ctx, call(4, 2, 2, 4, 3, 0, 8, 3, 7, 1.f), "gated_add_forward", "add_stride below H*D");
  expect_invalid(ctx, call(4, 2, 2, 4, 3, 0, 8, 3, 8, NAN), "gated_add_forward", "scale NaN");
  expect_invalid(ctx, nfn_gated_add_forward(ctx, p, p, p, nullptr, nullptr, 4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f, NFN_F32),
                 "gated_add_forward", "null add");
  expect_invalid(ctx,
                 nfn_gated_add_backward(ctx, p, p, p, p, nullptr, p, p, nullptr, p, 4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f,
                                        NFN_F32),
                 "gated_add_backward", "null dout");
  EXPECT(std::string(nfn_ctx_last_error(ctx)) == "gated_add_backward: null dout, gin, w or add", "message: %s",
         nfn_ctx_last_error(ctx));
  EXPECT(call(4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f) == NFN_OK, "gated_add_forward: valid arguments: %s",
         nfn_ctx_last_error(ctx));
  EXPECT(nfn_gated_add_forward(ctx, p, p, p, nullptr, p, 4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f, NFN_BF16) ==
             NFN_ERR_UNSUPPORTED,
         "gated_add_forward: bf16 storage is unsupported on the CPU");
  EXPECT(nfn_gated_add_backward(ctx, p, p, p, p, p, p, p, nullptr, p, 4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f, NFN_BF16) ==
             NFN_ERR_UNSUPPORTED,
         "gated_add_backward: bf16 storage is unsupported on the CPU");
}

}  // namespace

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  // name, B, T, H, D, G, shift, out_stride, out_offset, gin_stride, add_stride, shared, lam, scale
  const Layout layouts[] = {
      // value embeddings: 3 kv heads of 8 into the v part of qkv rows of 6 q, 3 k and 3 v heads
      {"value embedding", 2, 5, 3, 8, 12, 0, 96, 72, 20, 27, false, false, 3.f},
      // the smear over 3 sequences of 4: row 0 of each is left alone
      {"smear", 3, 4, 1, 30, 24, 1, 30, 0, 30, 30, true, true, 1.f},
      // two heads, a lambda, a shift, and a gate of 40 channels (more than a warp's lanes)
      {"shift 1, G 40", 2, 3, 2, 5, 40, 1, 11, 1, 41, 10, false, true, 0.7f},
      // sequences of one row with shift 1: nothing to add
      {"T 1", 4, 1, 2, 3, 4, 1, 6, 0, 4, 6, false, true, 1.f},
  };
  for (const Layout& L : layouts) {
    check_forward(ctx, L);
    check_backward(ctx, L);
    check_finite_differences(ctx, L);
  }
  // Rows enough for the threaded paths (nanochat's value-embedding gate: 12 channels, scale 3).
  const Layout big{"value embedding, 4 x 256 rows", 4, 256, 4, 32, 12, 0, 384, 256, 128, 128, false, false, 3.f};
  check_forward(ctx, big);
  check_backward(ctx, big);
  const Layout big_smear{"smear, 4 x 256 rows", 4, 256, 1, 96, 24, 1, 96, 0, 96, 96, true, true, 1.f};
  check_forward(ctx, big_smear);
  check_backward(ctx, big_smear);
  check_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("gated_add_test");
}
