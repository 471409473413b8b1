// Causal scaled-dot-product attention on the CPU (f32), flash style: the forward saves each
// row's log-sum-exp and the backward recomputes the probabilities from it, so no (T,T)
// matrix outlives a call.
#include <cmath>
#include <vector>

#include "cc/ops/cpu/check.h"

namespace {

nfn_status check_geometry(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B=%d T=%d C=%d NH=%d must be positive", op,
              B, T, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  return NFN_OK;
}

float dot(const float* a, const float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B,
                                 int T, int C, int NH, nfn_dtype dtype) {
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "attention_forward", dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, "attention_forward", B, T, C, NH));
  NFN_REQUIRE(out && lse && qkv, "attention_forward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  float* y = static_cast<float*>(out);
  const int hs = C / NH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const long C3 = 3L * C;
#pragma omp parallel
  {
    std::vector<float> p(T);
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const float* q = x + (static_cast<long>(b) * T + t) * C3 + h * hs;
          float m = -INFINITY;
          for (int j = 0; j <= t; ++j) {
            const float* k = x + (static_cast<long>(b) * T + j) * C3 + C + h * hs;
            p[j] = scale * dot(q, k, hs);
            m = std::fmax(m, p[j]);
          }
          float sum = 0.f;
          for (int j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - m));
          float* o = y + (static_cast<long>(b) * T + t) * C + h * hs;
          for (int c = 0; c < hs; ++c) o[c] = 0.f;
          for (int j = 0; j <= t; ++j) {
            const float* v = x + (static_cast<long>(b) * T + j) * C3 + 2 * C + h * hs;
            const float w = p[j] / sum;
            for (int c = 0; c < hs; ++c) o[c] += w * v[c];
          }
          lse[(static_cast<long>(b) * NH + h) * T + t] = m + std::log(sum);
        }
  }
  return NFN_OK;
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* lse, int B, int T, int C, int NH,
                                  nfn_dtype dtype) {
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "attention_backward", dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, "attention_backward", B, T, C, NH));
  NFN_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  const float* g = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dqkv);
  const int hs = C / NH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const long C3 = 3L * C;
#pragma omp parallel
  {
    std::vector<float> ds(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const long base = static_cast<long>(b) * T;
        for (int t = 0; t < T; ++t) {  // dk and dv of this head are summed over queries
          float* row = dx + (base + t) * C3;
          for (int c = 0; c < hs; ++c) row[h * hs + c] = row[C + h * hs + c] = row[2 * C + h * hs + c] = 0.f;
        }
        for (int t = 0; t < T; ++t) {
          const float* q = x + (base + t) * C3 + h * hs;
          const float* go = g + (base + t) * C + h * hs;
          const float D = dot(go, y + (base + t) * C + h * hs, hs);
          const float l = lse[(static_cast<long>(b) * NH + h) * T + t];
          float* dq = dx + (base + t) * C3 + h * hs;
          for (int j = 0; j <= t; ++j) {
            const float* k = x + (base + j) * C3 + C + h * hs;
            const float* v = x + (base + j) * C3 + 2 * C + h * hs;
            const float p = std::exp(scale * dot(q, k, hs) - l);
            ds[j] = p * (dot(go, v, hs) - D);
            float* dv = dx + (base + j) * C3 + 2 * C + h * hs;
            for (int c = 0; c < hs; ++c) dv[c] += p * go[c];
          }
          for (int j = 0; j <= t; ++j) {
            const float* k = x + (base + j) * C3 + C + h * hs;
            float* dk = dx + (base + j) * C3 + C + h * hs;
            const float s = scale * ds[j];
            for (int c = 0; c < hs; ++c) {
              dq[c] += s * k[c];
              dk[c] += s * q[c];
            }
          }
        }
      }
  }
  return NFN_OK;
}

}  // extern "C"
