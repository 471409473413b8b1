// KV-cached causal attention on the CPU (f32), for generation, with attention_forward's
// grouped-query heads and sliding window. Decoding feeds one new position at a time, so each
// (batch, head, query) row is a pair of matrix-vector passes over the cache positions it
// sees; rows run in parallel and every row's arithmetic is independent of how many queries
// share the call, so a prefill and a token-by-token decode agree closely.
#include <cmath>
#include <cstring>
#include <string>

#include "cc/ops/attention_geometry.h"
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/reduce_math.h"

extern "C" {

nfn_status nfn_attention_kv_cached(nfn_ctx* ctx, void* out, void* k_cache, void* v_cache, const void* qkv, int B,
                                   int Tq, int pos, int maxT, int NH, int NKV, int HD, int window,
                                   nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_kv_cached";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  const std::string why = nfn::attention::check_cached_args(B, Tq, pos, maxT, NH, NKV, HD, window);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  NFN_REQUIRE(out && k_cache && v_cache && qkv, "%s: null out, k_cache, v_cache or qkv", op);
  const float* x = static_cast<const float*>(qkv);
  float* kc = static_cast<float*>(k_cache);
  float* vc = static_cast<float*>(v_cache);
  float* y = static_cast<float*>(out);
  const long C = static_cast<long>(NH) * HD, KV = static_cast<long>(NKV) * HD, ld = C + 2 * KV;
  const int group = NH / NKV;
  const float scale = 1.f / std::sqrt(static_cast<float>(HD));

  // Append the new keys and values first: every query below reads them.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tq; ++t) {
      const float* src = x + (static_cast<long>(b) * Tq + t) * ld;
      const long at = (static_cast<long>(b) * maxT + pos + t) * KV;
      std::memcpy(kc + at, src + C, KV * sizeof(float));
      std::memcpy(vc + at, src + C + KV, KV * sizeof(float));
    }

  const int keys_max = window > 0 && window + 1 < pos + Tq ? window + 1 : pos + Tq;
  float* scratch = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention,
                                            static_cast<size_t>(B) * NH * Tq * keys_max);
  const long rows = static_cast<long>(B) * NH * Tq;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % Tq);
    const int h = static_cast<int>(r / Tq % NH);
    const int b = static_cast<int>(r / Tq / NH);
    // Query pos+t sees cache positions first..pos+t: causal, within the window.
    const int first = nfn::attention::first_key(pos + t, window), keys = pos + t + 1 - first;
    const long kv_col = static_cast<long>(h / group) * HD;
    const float* q = x + (static_cast<long>(b) * Tq + t) * ld + static_cast<long>(h) * HD;
    const float* kb = kc + (static_cast<long>(b) * maxT + first) * KV + kv_col;
    const float* vb = vc + (static_cast<long>(b) * maxT + first) * KV + kv_col;
    float* p = scratch + r * keys_max;
    for (int j = 0; j < keys; ++j) p[j] = nfn::cpu::row_dot(q, kb + j * KV, HD) * scale;
    const float m = nfn::cpu::row_max(p, keys);
    for (int j = 0; j < keys; ++j) p[j] = nfn::cpu::fast_exp(p[j] - m);
    const float inv = 1.f / nfn::cpu::row_sum(p, keys);
    float* o = y + (static_cast<long>(b) * Tq + t) * C + static_cast<long>(h) * HD;
    for (int c = 0; c < HD; ++c) o[c] = 0.f;
    for (int j = 0; j < keys; ++j) {
      const float w = p[j] * inv;
      const float* v = vb + j * KV;
      for (int c = 0; c < HD; ++c) o[c] += w * v[c];
    }
  }
  return NFN_OK;
}

}  // extern "C"
