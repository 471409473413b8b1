// Rotary position embedding (rope_forward, rope_backward in nfn_ops.def), the parts both op
// libraries share so that they rotate by the same angles and refuse the same arguments: the
// frequencies (host), cos and sin of an angle (host and device), the argument checks.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#ifdef __CUDACC__
#define NFN_ROPE_FN __host__ __device__ __forceinline__
#else
#define NFN_ROPE_FN inline
#endif

namespace nfn::rope {

// Positions at or past this are not exact in f32 (the angle is float(t) * inv_freq).
constexpr long long kMaxPosition = 1LL << 24;

// inv_freq[j] = theta^(-2j/HD): computed in double and rounded once to f32 on the host, so
// every library multiplies by the same frequencies (Hugging Face and nanochat compute them in
// f32 arithmetic, within an ulp or two of these).
inline float inv_freq(float theta, int j, int HD) {
  return static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * j / HD));
}

// *s = sin(a), *c = cos(a) for an f32 angle a >= 0, within about an ulp, the same bits on
// every backend. a is reduced by multiples of pi/2 in double (pi/2 in two parts, exact enough
// for the 2^24 rad of the largest position), then Cephes' sinf and cosf polynomials run on
// [-pi/4, pi/4] in f32. Every multiply-add is an explicit fma, so no compiler's contraction
// choices change the result, and there is no slow path (CUDA's sinf falls back to a Payne-Hanek
// reduction in local memory for angles past 105615).
NFN_ROPE_FN void sincos(float a, float* s, float* c) {
  const double k = ::rint(static_cast<double>(a) * 0.63661977236758134);  // a / (pi/2)
  const float r = static_cast<float>(::fma(-k, 6.123233995736766e-17, ::fma(-k, 1.5707963267948966, a)));
  const float z = r * r;
  float ps = ::fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f);
  ps = ::fmaf(ps, z, -1.6666654611e-1f);
  const float sin_r = ::fmaf(ps * z, r, r);
  float pc = ::fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f);
  pc = ::fmaf(pc, z, 4.166664568298827e-2f);
  const float cos_r = ::fmaf(pc * z, z, ::fmaf(-0.5f, z, 1.f));
  const int quadrant = static_cast<int>(static_cast<long long>(k) & 3);
  const float sin_q = (quadrant & 1) ? cos_r : sin_r, cos_q = (quadrant & 1) ? sin_r : cos_r;
  *s = (quadrant & 2) ? -sin_q : sin_q;
  *c = (quadrant == 1 || quadrant == 2) ? -cos_q : cos_q;
}

// Why rope_forward/rope_backward (`op`) refuse these arguments, as the one-line message both
// libraries give ("" when they are valid). `pointers` names the two tensors ("out or inp").
inline std::string check_args(const char* op, const char* pointers, const void* out, const void* inp, int N,
                              int T, int pos_offset, int stride, int NH, int NKV, int HD, float theta, int sign) {
  char why[200] = "";
  const long long qk_width = (static_cast<long long>(NH) + NKV) * HD;
  if (out == nullptr || inp == nullptr)
    std::snprintf(why, sizeof why, "%s: null %s", op, pointers);
  else if (N <= 0 || T <= 0 || N % T != 0)
    std::snprintf(why, sizeof why, "%s: N=%d rows must be a positive multiple of T=%d", op, N, T);
  else if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
    std::snprintf(why, sizeof why, "%s: NKV=%d must be positive and divide NH=%d", op, NKV, NH);
  else if (HD <= 0 || HD % 2 != 0)
    std::snprintf(why, sizeof why, "%s: head dim HD=%d must be positive and even", op, HD);
  else if (stride < qk_width)
    std::snprintf(why, sizeof why, "%s: stride=%d is smaller than the q and k heads' (NH+NKV)*HD=%lld", op,
                  stride, qk_width);
  else if (!(theta > 0.f) || std::isinf(theta))
    std::snprintf(why, sizeof why, "%s: theta=%g must be positive and finite", op, static_cast<double>(theta));
  else if (sign != 1 && sign != -1)
    std::snprintf(why, sizeof why, "%s: sign=%d must be 1 (Hugging Face rotate_half) or -1 (nanochat)", op, sign);
  else if (pos_offset < 0 || static_cast<long long>(pos_offset) + T > kMaxPosition)
    std::snprintf(why, sizeof why, "%s: positions [%d, %lld) must lie in [0, 2^24] (exact in f32)", op, pos_offset,
                  static_cast<long long>(pos_offset) + T);
  return why;
}

}  // namespace nfn::rope

// Defines the ABI's nfn_rope_forward and nfn_rope_backward over a library's
// impl(ctx, op, pointers, out, inp, N, T, pos_offset, stride, NH, NKV, HD, theta, sign, dtype,
// direction), direction 1 for the forward and -1 (the inverse rotation) for the backward.
#define NFN_ROPE_ENTRY_POINTS(impl)                                                                            \
  extern "C" nfn_status nfn_rope_forward(nfn_ctx* ctx, void* out, const void* inp, int N, int T, int pos_offset, \
                                         int stride, int NH, int NKV, int HD, float theta, int sign,            \
                                         nfn_dtype dtype) {                                                     \
    return impl(ctx, "rope_forward", "out or inp", out, inp, N, T, pos_offset, stride, NH, NKV, HD, theta,       \
                sign, dtype, 1);                                                                                \
  }                                                                                                             \
  extern "C" nfn_status nfn_rope_backward(nfn_ctx* ctx, void* dinp, const void* dout, int N, int T,              \
                                          int pos_offset, int stride, int NH, int NKV, int HD, float theta,      \
                                          int sign, nfn_dtype dtype) {                                          \
    return impl(ctx, "rope_backward", "dinp or dout", dinp, dout, N, T, pos_offset, stride, NH, NKV, HD, theta,  \
                sign, dtype, -1);                                                                               \
  }
