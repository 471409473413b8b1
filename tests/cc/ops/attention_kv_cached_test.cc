// KV-cached attention with grouped-query heads and sliding windows: the cache rows it writes
// are exactly the new k and v heads, rows it must not touch keep their values, and out
// matches a naive double softmax(q K^T / sqrt(HD)) V over cache positions
// [max(0, p - W), p] of the query's kv head for every new query at position p. Feeding a
// sequence in chunks (prefill, then one token at a time) matches the training
// attention_forward on the whole with the same window.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

struct Case {
  int B, Tq, pos, maxT, NH, NKV, HD, W;
};

static void check_against_naive(nfn_ctx* ctx, Case g) {
  const int B = g.B, Tq = g.Tq, pos = g.pos, maxT = g.maxT, NH = g.NH, NKV = g.NKV, HD = g.HD, W = g.W;
  const size_t C = static_cast<size_t>(NH) * HD, KV = static_cast<size_t>(NKV) * HD, ld = C + 2 * KV;
  std::vector<float> qkv = random_vec(B * Tq * ld, 7 + pos + Tq, 1.f);
  // Earlier positions hold keys/values from "previous calls"; later ones are sentinels.
  std::vector<float> kc = random_vec(B * maxT * KV, 3, 1.f);
  std::vector<float> vc = random_vec(B * maxT * KV, 4, 1.f);
  const std::vector<float> kc0 = kc, vc0 = vc;
  std::vector<float> out(B * Tq * C, 99.f);
  EXPECT(nfn_attention_kv_cached(ctx, out.data(), kc.data(), vc.data(), qkv.data(), B, Tq, pos, maxT, NH, NKV, HD, W,
                                 NFN_F32) == NFN_OK, "attention_kv_cached: %s", nfn_ctx_last_error(ctx));

  // Expected cache: the old one with rows [pos, pos+Tq) replaced by the new k and v heads.
  std::vector<float> want_k = kc0, want_v = vc0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tq; ++t)
      for (size_t c = 0; c < KV; ++c) {
        const size_t src = (static_cast<size_t>(b) * Tq + t) * ld + C + c;
        const size_t dst = (static_cast<size_t>(b) * maxT + pos + t) * KV + c;
        want_k[dst] = qkv[src];
        want_v[dst] = qkv[src + KV];
      }
  EXPECT(std::memcmp(kc.data(), want_k.data(), kc.size() * 4) == 0, "k_cache contents (pos=%d Tq=%d)", pos, Tq);
  EXPECT(std::memcmp(vc.data(), want_v.data(), vc.size() * 4) == 0, "v_cache contents (pos=%d Tq=%d)", pos, Tq);

  std::vector<double> want(out.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < Tq; ++t) {
        const int p = pos + t, lo = W > 0 ? std::max(0, p - W) : 0, keys = p + 1 - lo;
        const size_t kv_col = static_cast<size_t>(h / (NH / NKV)) * HD;
        std::vector<double> s(keys);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < keys; ++j) {
          double d = 0;
          for (int c = 0; c < HD; ++c)
            d += static_cast<double>(qkv[(static_cast<size_t>(b) * Tq + t) * ld + h * HD + c]) *
                 want_k[(static_cast<size_t>(b) * maxT + lo + j) * KV + kv_col + c];
          s[j] = d / std::sqrt(static_cast<double>(HD));
          m = std::fmax(m, s[j]);
        }
        for (int j = 0; j < keys; ++j) sum += std::exp(s[j] - m);
        for (int c = 0; c < HD; ++c) {
          double o = 0;
          for (int j = 0; j < keys; ++j)
            o += std::exp(s[j] - m) / sum * want_v[(static_cast<size_t>(b) * maxT + lo + j) * KV + kv_col + c];
          want[(static_cast<size_t>(b) * Tq + t) * C + h * HD + c] = o;
        }
      }
  char what[160];
  std::snprintf(what, sizeof what, "attention_kv_cached B=%d Tq=%d pos=%d maxT=%d NH=%d NKV=%d HD=%d window=%d", B,
                Tq, pos, maxT, NH, NKV, HD, W);
  expect_close(what, out, want, 1e-5, 1e-4);
}

// Prefill `split` positions, then decode the rest one at a time: the outputs equal
// attention_forward over the whole sequence with the same heads and window.
static void check_chunks_match_training_attention(nfn_ctx* ctx, int B, int T, int NH, int NKV, int HD, int W,
                                                  int split) {
  const size_t C = static_cast<size_t>(NH) * HD, KV = static_cast<size_t>(NKV) * HD, ld = C + 2 * KV;
  std::vector<float> qkv = random_vec(B * T * ld, 21, 1.f);
  std::vector<float> full(B * T * C), lse(static_cast<size_t>(B) * NH * T);
  EXPECT(nfn_attention_forward(ctx, full.data(), lse.data(), qkv.data(), B, T, NH, NKV, HD, W, NFN_F32) == NFN_OK,
         "attention_forward");
  const int maxT = T + 3;
  std::vector<float> kc(B * maxT * KV), vc(kc.size());
  std::vector<double> want(full.begin(), full.end());
  std::vector<float> got(full.size());
  for (int pos = 0; pos < T;) {
    const int Tq = pos == 0 ? split : 1;
    std::vector<float> chunk(B * Tq * ld), out(B * Tq * C);
    for (int b = 0; b < B; ++b)
      std::memcpy(&chunk[b * Tq * ld], &qkv[(b * T + pos) * ld], Tq * ld * 4);
    EXPECT(nfn_attention_kv_cached(ctx, out.data(), kc.data(), vc.data(), chunk.data(), B, Tq, pos, maxT, NH, NKV,
                                   HD, W, NFN_F32) == NFN_OK, "attention_kv_cached chunk at %d", pos);
    for (int b = 0; b < B; ++b) std::memcpy(&got[(b * T + pos) * C], &out[b * Tq * C], Tq * C * 4);
    pos += Tq;
  }
  char what[128];
  std::snprintf(what, sizeof what, "chunked attention_kv_cached vs attention_forward NH=%d NKV=%d window=%d", NH, NKV,
                W);
  expect_close(what, got, want, 1e-5, 1e-4);
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  check_against_naive(ctx, {2, 5, 0, 8, 2, 2, 4, 0});      // prefill from an empty cache
  check_against_naive(ctx, {2, 1, 6, 8, 2, 2, 4, 0});      // one decode step
  check_against_naive(ctx, {1, 3, 4, 7, 3, 3, 4, 0});      // a block ending at the cache's end
  check_against_naive(ctx, {1, 1, 0, 1, 1, 1, 4, 0});      // a single position attends to itself
  check_against_naive(ctx, {3, 2, 40, 64, 2, 2, 64, 0});   // the model's head size
  check_against_naive(ctx, {2, 3, 5, 12, 4, 2, 8, 0});     // two query heads a kv head
  check_against_naive(ctx, {1, 2, 9, 12, 4, 1, 8, 0});     // one kv head for all
  check_against_naive(ctx, {2, 4, 6, 12, 4, 2, 8, 1});     // window 1: the query and the one before
  check_against_naive(ctx, {1, 5, 0, 8, 4, 1, 8, 3});      // a prefill, window 3
  check_against_naive(ctx, {2, 1, 30, 32, 6, 3, 16, 3});   // a decode step far past the window
  check_against_naive(ctx, {1, 3, 4, 8, 4, 2, 8, 50});     // a window past every position
  check_chunks_match_training_attention(ctx, 2, 19, 2, 2, 8, 0, 7);
  check_chunks_match_training_attention(ctx, 1, 70, 2, 2, 4, 0, 1);
  check_chunks_match_training_attention(ctx, 2, 19, 4, 2, 8, 0, 7);
  check_chunks_match_training_attention(ctx, 1, 23, 4, 1, 8, 1, 5);
  check_chunks_match_training_attention(ctx, 2, 90, 4, 2, 8, 3, 9);
  check_chunks_match_training_attention(ctx, 1, 150, 6, 3, 16, 70, 80);  // the forward's window spans tiles

  std::vector<float> buf(4096);
  float* p = buf.data();
  auto cached = [&](int Tq, int pos, int NH, int NKV, int HD, int W) {
    return nfn_attention_kv_cached(ctx, p, p, p, p, 1, Tq, pos, 8, NH, NKV, HD, W, NFN_F32);
  };
  expect_invalid(ctx, cached(4, 5, 2, 2, 4, 0), "attention_kv_cached", "positions past the cache");
  expect_invalid(ctx, cached(1, -1, 2, 2, 4, 0), "attention_kv_cached", "negative pos");
  expect_invalid(ctx, cached(1, 0, 3, 2, 4, 0), "attention_kv_cached", "NKV not dividing NH");
  expect_invalid(ctx, cached(1, 0, 2, 0, 4, 0), "attention_kv_cached", "NKV 0");
  expect_invalid(ctx, cached(1, 0, 2, 2, 0, 0), "attention_kv_cached", "HD 0");
  expect_invalid(ctx, cached(1, 0, 2, 2, 4, -2), "attention_kv_cached", "negative window");
  expect_invalid(ctx, nfn_attention_kv_cached(ctx, p, nullptr, p, p, 1, 1, 0, 8, 2, 2, 4, 0, NFN_F32),
                 "attention_kv_cached", "null k_cache");
  EXPECT(nfn_attention_kv_cached(ctx, p, p, p, p, 1, 1, 0, 8, 2, 2, 4, 0, NFN_BF16) == NFN_ERR_UNSUPPORTED,
         "bf16 kv-cached attention unsupported on the CPU");
  nfn_ctx_destroy(ctx);
  return finish("attention_kv_cached_test");
}
