// KV-cached causal attention on the CPU (f32), for generation. Decoding feeds one new
// position at a time, so each (batch, head, query) row is a pair of matrix-vector passes
// over the cache; rows run in parallel and every row's arithmetic is independent of how
// many queries share the call, so a prefill and a token-by-token decode agree closely.
#include <cmath>
#include <cstring>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/reduce_math.h"

extern "C" {

nfn_status nfn_attention_kv_cached(nfn_ctx* ctx, void* out, void* k_cache, void* v_cache, const void* qkv,
                                   int B, int Tq, int pos, int maxT, int C, int NH, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_kv_cached";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_REQUIRE(B > 0 && Tq > 0 && maxT > 0 && C > 0 && NH > 0,
              "%s: B=%d Tq=%d maxT=%d C=%d NH=%d must be positive", op, B, Tq, maxT, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  NFN_REQUIRE(pos >= 0 && static_cast<long>(pos) + Tq <= maxT,
              "%s: positions [%d, %ld) do not fit the cache of %d", op, pos, static_cast<long>(pos) + Tq, maxT);
  NFN_REQUIRE(out && k_cache && v_cache && qkv, "%s: null pointer", op);
  const float* x = static_cast<const float*>(qkv);
  float* kc = static_cast<float*>(k_cache);
  float* vc = static_cast<float*>(v_cache);
  float* y = static_cast<float*>(out);
  const int hs = C / NH;
  const long C3 = 3L * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));

  // Append the new keys and values first: every query below reads them.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tq; ++t) {
      const float* src = x + (static_cast<long>(b) * Tq + t) * C3;
      const long at = (static_cast<long>(b) * maxT + pos + t) * C;
      std::memcpy(kc + at, src + C, C * sizeof(float));
      std::memcpy(vc + at, src + 2 * C, C * sizeof(float));
    }

  const int keys_max = pos + Tq;
  float* scratch = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention,
                                            static_cast<size_t>(B) * NH * Tq * keys_max);
  const long rows = static_cast<long>(B) * NH * Tq;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % Tq);
    const int h = static_cast<int>(r / Tq % NH);
    const int b = static_cast<int>(r / Tq / NH);
    const int keys = pos + t + 1;  // causal: query pos+t sees cache positions 0..pos+t
    const float* q = x + (static_cast<long>(b) * Tq + t) * C3 + static_cast<long>(h) * hs;
    const float* kb = kc + static_cast<long>(b) * maxT * C + static_cast<long>(h) * hs;
    const float* vb = vc + static_cast<long>(b) * maxT * C + static_cast<long>(h) * hs;
    float* p = scratch + r * keys_max;
    for (int j = 0; j < keys; ++j) p[j] = nfn::cpu::row_dot(q, kb + static_cast<long>(j) * C, hs) * scale;
    const float m = nfn::cpu::row_max(p, keys);
    for (int j = 0; j < keys; ++j) p[j] = nfn::cpu::fast_exp(p[j] - m);
    const float inv = 1.f / nfn::cpu::row_sum(p, keys);
    float* o = y + (static_cast<long>(b) * Tq + t) * C + static_cast<long>(h) * hs;
    for (int c = 0; c < hs; ++c) o[c] = 0.f;
    for (int j = 0; j < keys; ++j) {
      const float w = p[j] * inv;
      const float* v = vb + static_cast<long>(j) * C;
      for (int c = 0; c < hs; ++c) o[c] += w * v[c];
    }
  }
  return NFN_OK;
}

}  // extern "C"
