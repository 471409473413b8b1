// The argument checks of the mixing ops, scaled_sum_forward/backward and
// gated_add_forward/backward, shared by both op libraries so that each refuses the same
// arguments with the same message ("" where they are usable, else one line naming the op and
// the argument).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace nfn::mix {

// scaled_sum_forward: out, x and y given (unless n is 0), ca and cb finite.
inline std::string check_scaled_sum_forward(const void* out, const void* x, const void* y, float ca, float cb,
                                            size_t n) {
  const char* op = "scaled_sum_forward";
  char why[200] = "";
  if (!std::isfinite(ca) || !std::isfinite(cb))
    std::snprintf(why, sizeof why, "%s: ca=%g cb=%g must be finite", op, static_cast<double>(ca),
                  static_cast<double>(cb));
  else if (n > 0 && (out == nullptr || x == nullptr || y == nullptr))
    std::snprintf(why, sizeof why, "%s: null out, x or y", op);
  return why;
}

// scaled_sum_backward: dout given (unless n is 0), x wherever da is, y wherever db is.
inline std::string check_scaled_sum_backward(const void* da, const void* db, const void* dout, const void* x,
                                             const void* y, float ca, float cb, size_t n) {
  const char* op = "scaled_sum_backward";
  char why[200] = "";
  if (!std::isfinite(ca) || !std::isfinite(cb))
    std::snprintf(why, sizeof why, "%s: ca=%g cb=%g must be finite", op, static_cast<double>(ca),
                  static_cast<double>(cb));
  else if (n > 0 && dout == nullptr)
    std::snprintf(why, sizeof why, "%s: null dout", op);
  else if (n > 0 && da != nullptr && x == nullptr)
    std::snprintf(why, sizeof why, "%s: da needs x (null)", op);
  else if (n > 0 && db != nullptr && y == nullptr)
    std::snprintf(why, sizeof why, "%s: db needs y (null)", op);
  return why;
}

// gated_add_forward/backward (`op`): the tensors named in `pointers` given (`given` false
// when one is NULL), the shape and strides as nfn_ops.def asks.
inline std::string check_gated_add(const char* op, const char* pointers, bool given, int N, int T, int H, int D,
                                   int G, int shift, int out_stride, int gin_stride, int add_stride, float scale) {
  char why[200] = "";
  const long long width = static_cast<long long>(H) * D;
  if (!given)
    std::snprintf(why, sizeof why, "%s: null %s", op, pointers);
  else if (N <= 0 || T <= 0 || N % T != 0)
    std::snprintf(why, sizeof why, "%s: N=%d rows must be a positive multiple of T=%d", op, N, T);
  else if (H <= 0 || D <= 0 || G <= 0)
    std::snprintf(why, sizeof why, "%s: H=%d D=%d G=%d must be positive", op, H, D, G);
  else if (shift != 0 && shift != 1)
    std::snprintf(why, sizeof why, "%s: shift=%d must be 0 or 1", op, shift);
  else if (gin_stride < G)
    std::snprintf(why, sizeof why, "%s: gin_stride=%d is smaller than G=%d", op, gin_stride, G);
  else if (out_stride < width || add_stride < width)
    std::snprintf(why, sizeof why, "%s: out_stride=%d and add_stride=%d must be at least H*D=%lld", op, out_stride,
                  add_stride, width);
  else if (!std::isfinite(scale))
    std::snprintf(why, sizeof why, "%s: scale=%g must be finite", op, static_cast<double>(scale));
  return why;
}

}  // namespace nfn::mix
