// The argument checks of rmsnorm_forward's eps and of head_rmsnorm_forward/backward, shared by
// both op libraries so that each refuses the same arguments with the same message.
#pragma once

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>

namespace nfn::norm {

// Why `op` refuses this eps ("" when it is usable): positive and finite (a NaN fails too).
inline std::string check_eps(const char* op, float eps) {
  char why[160] = "";
  if (!(eps > 0.f) || std::isinf(eps))
    std::snprintf(why, sizeof why, "%s: eps=%g must be positive and finite", op, static_cast<double>(eps));
  return why;
}

// Why head_rmsnorm_forward/backward (`op`) refuse these arguments ("" when they are valid).
// `pointers` names the tensors, all required ("out, rstd or inp").
inline std::string check_head_args(const char* op, const char* pointers, std::initializer_list<const void*> tensors,
                                   int N, int H, int D, int stride, float scale) {
  char why[200] = "";
  const long long width = static_cast<long long>(H) * D;
  bool null = false;
  for (const void* p : tensors) null = null || p == nullptr;
  if (null)
    std::snprintf(why, sizeof why, "%s: null %s", op, pointers);
  else if (N <= 0 || H <= 0 || D <= 0)
    std::snprintf(why, sizeof why, "%s: N=%d H=%d D=%d must be positive", op, N, H, D);
  else if (stride < width)
    std::snprintf(why, sizeof why, "%s: stride=%d is smaller than the heads' H*D=%lld", op, stride, width);
  else if (!std::isfinite(scale) || scale == 0.f)
    std::snprintf(why, sizeof why, "%s: scale=%g must be finite and not 0", op, static_cast<double>(scale));
  return why;
}

// head_rmsnorm_forward's arguments: the tensors' and shape's checks, then eps's.
inline std::string check_head_forward(const void* out, const float* rstd, const void* inp, int N, int H, int D,
                                      int stride, float scale, float eps) {
  const char* op = "head_rmsnorm_forward";
  const std::string why = check_head_args(op, "out, rstd or inp", {out, rstd, inp}, N, H, D, stride, scale);
  return why.empty() ? check_eps(op, eps) : why;
}

inline std::string check_head_backward(const void* dinp, const void* dout, const void* out, const float* rstd, int N,
                                       int H, int D, int stride, float scale) {
  return check_head_args("head_rmsnorm_backward", "dinp, dout, out or rstd", {dinp, dout, out, rstd}, N, H, D, stride,
                         scale);
}

}  // namespace nfn::norm
