// KV-cached attention: the cache rows it writes are exactly the new k and v, rows it must
// not touch keep their values, and out matches a naive double softmax(q K^T / sqrt(hs)) V
// over cache positions [0, pos+t] for every new query t. Feeding a sequence in chunks
// (prefill, then one token at a time) matches the training attention_forward on the whole.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

struct Case {
  int B, Tq, pos, maxT, C, NH;
};

static void check_against_naive(nfn_ctx* ctx, Case g) {
  const int B = g.B, Tq = g.Tq, pos = g.pos, maxT = g.maxT, C = g.C, NH = g.NH, hs = C / NH;
  std::vector<float> qkv = random_vec(static_cast<size_t>(B) * Tq * 3 * C, 7 + pos + Tq, 1.f);
  // Earlier positions hold keys/values from "previous calls"; later ones are sentinels.
  std::vector<float> kc = random_vec(static_cast<size_t>(B) * maxT * C, 3, 1.f);
  std::vector<float> vc = random_vec(static_cast<size_t>(B) * maxT * C, 4, 1.f);
  const std::vector<float> kc0 = kc, vc0 = vc;
  std::vector<float> out(static_cast<size_t>(B) * Tq * C, 99.f);
  EXPECT(nfn_attention_kv_cached(ctx, out.data(), kc.data(), vc.data(), qkv.data(), B, Tq, pos, maxT, C, NH,
                                 NFN_F32) == NFN_OK, "attention_kv_cached: %s", nfn_ctx_last_error(ctx));

  // Expected cache: the old one with rows [pos, pos+Tq) replaced by the new k and v.
  std::vector<float> want_k = kc0, want_v = vc0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tq; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t src = (static_cast<size_t>(b) * Tq + t) * 3 * C + c;
        const size_t dst = (static_cast<size_t>(b) * maxT + pos + t) * C + c;
        want_k[dst] = qkv[src + C];
        want_v[dst] = qkv[src + 2 * C];
      }
  EXPECT(std::memcmp(kc.data(), want_k.data(), kc.size() * 4) == 0, "k_cache contents (pos=%d Tq=%d)", pos, Tq);
  EXPECT(std::memcmp(vc.data(), want_v.data(), vc.size() * 4) == 0, "v_cache contents (pos=%d Tq=%d)", pos, Tq);

  std::vector<double> want(out.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < Tq; ++t) {
        const int keys = pos + t + 1;
        std::vector<double> s(keys);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < keys; ++j) {
          double d = 0;
          for (int c = 0; c < hs; ++c)
            d += static_cast<double>(qkv[(static_cast<size_t>(b) * Tq + t) * 3 * C + h * hs + c]) *
                 want_k[(static_cast<size_t>(b) * maxT + j) * C + h * hs + c];
          s[j] = d / std::sqrt(static_cast<double>(hs));
          m = std::fmax(m, s[j]);
        }
        for (int j = 0; j < keys; ++j) sum += std::exp(s[j] - m);
        for (int c = 0; c < hs; ++c) {
          double o = 0;
          for (int j = 0; j < keys; ++j)
            o += std::exp(s[j] - m) / sum * want_v[(static_cast<size_t>(b) * maxT + j) * C + h * hs + c];
          want[(static_cast<size_t>(b) * Tq + t) * C + h * hs + c] = o;
        }
      }
  char what[128];
  std::snprintf(what, sizeof what, "attention_kv_cached B=%d Tq=%d pos=%d maxT=%d C=%d NH=%d", B, Tq, pos, maxT,
                C, NH);
  expect_close(what, out, want, 1e-5, 1e-4);
}

// Prefill `split` positions, then decode the rest one at a time: the outputs equal
// attention_forward over the whole sequence.
static void check_chunks_match_training_attention(nfn_ctx* ctx, int B, int T, int C, int NH, int split) {
  std::vector<float> qkv = random_vec(static_cast<size_t>(B) * T * 3 * C, 21, 1.f);
  std::vector<float> full(static_cast<size_t>(B) * T * C), lse(static_cast<size_t>(B) * NH * T);
  EXPECT(nfn_attention_forward(ctx, full.data(), lse.data(), qkv.data(), B, T, C, NH, NFN_F32) == NFN_OK,
         "attention_forward");
  const int maxT = T + 3;
  std::vector<float> kc(static_cast<size_t>(B) * maxT * C), vc(kc.size());
  std::vector<double> want(full.begin(), full.end());
  std::vector<float> got(full.size());
  for (int pos = 0; pos < T;) {
    const int Tq = pos == 0 ? split : 1;
    std::vector<float> chunk(static_cast<size_t>(B) * Tq * 3 * C), out(static_cast<size_t>(B) * Tq * C);
    for (int b = 0; b < B; ++b)
      std::memcpy(&chunk[static_cast<size_t>(b) * Tq * 3 * C], &qkv[(static_cast<size_t>(b) * T + pos) * 3 * C],
                  static_cast<size_t>(Tq) * 3 * C * 4);
    EXPECT(nfn_attention_kv_cached(ctx, out.data(), kc.data(), vc.data(), chunk.data(), B, Tq, pos, maxT, C, NH,
                                   NFN_F32) == NFN_OK, "attention_kv_cached chunk at %d", pos);
    for (int b = 0; b < B; ++b)
      std::memcpy(&got[(static_cast<size_t>(b) * T + pos) * C], &out[static_cast<size_t>(b) * Tq * C],
                  static_cast<size_t>(Tq) * C * 4);
    pos += Tq;
  }
  expect_close("chunked attention_kv_cached vs attention_forward", got, want, 1e-5, 1e-4);
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  check_against_naive(ctx, {2, 5, 0, 8, 8, 2});     // prefill from an empty cache
  check_against_naive(ctx, {2, 1, 6, 8, 8, 2});     // one decode step
  check_against_naive(ctx, {1, 3, 4, 7, 12, 3});    // a block ending at the cache's end
  check_against_naive(ctx, {1, 1, 0, 1, 4, 1});     // a single position attends to itself
  check_against_naive(ctx, {3, 2, 40, 64, 128, 2}); // the model's head size
  check_chunks_match_training_attention(ctx, 2, 19, 16, 2, 7);
  check_chunks_match_training_attention(ctx, 1, 70, 8, 2, 1);

  std::vector<float> buf(4096);
  float* p = buf.data();
  expect_invalid(ctx, nfn_attention_kv_cached(ctx, p, p, p, p, 1, 4, 5, 8, 8, 2, NFN_F32), "attention_kv_cached",
                 "positions past the cache");
  expect_invalid(ctx, nfn_attention_kv_cached(ctx, p, p, p, p, 1, 1, -1, 8, 8, 2, NFN_F32), "attention_kv_cached",
                 "negative pos");
  expect_invalid(ctx, nfn_attention_kv_cached(ctx, p, p, p, p, 1, 1, 0, 8, 10, 3, NFN_F32), "attention_kv_cached",
                 "C not a multiple of NH");
  expect_invalid(ctx, nfn_attention_kv_cached(ctx, p, nullptr, p, p, 1, 1, 0, 8, 8, 2, NFN_F32),
                 "attention_kv_cached", "null k_cache");
  EXPECT(nfn_attention_kv_cached(ctx, p, p, p, p, 1, 1, 0, 8, 8, 2, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "bf16 kv-cached attention unsupported on the CPU");
  nfn_ctx_destroy(ctx);
  return finish("attention_kv_cached_test");
}
