// What both op libraries share about attention_forward/backward/kv_cached's geometry
// (nfn_ops.def): the argument checks, so each refuses the same arguments with the same
// message, and the sliding window's first visible key (host and device).
#pragma once

#include <cstdio>
#include <string>

#ifdef __CUDACC__
#define NFN_ATTENTION_FN __host__ __device__ __forceinline__
#else
#define NFN_ATTENTION_FN inline
#endif

namespace nfn::attention {

// The first key a query at position t sees: t - window clamped at 0, or 0 without a window.
NFN_ATTENTION_FN int first_key(int t, int window) { return window > 0 && t > window ? t - window : 0; }

// Why the heads and window are refused (one line naming `op` and the argument), "" if usable.
inline std::string check_heads(const char* op, int NH, int NKV, int HD, int window) {
  char why[160] = "";
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
    std::snprintf(why, sizeof why, "%s: NKV=%d must be positive and divide NH=%d", op, NKV, NH);
  else if (HD <= 0)
    std::snprintf(why, sizeof why, "%s: head dim HD=%d must be positive", op, HD);
  else if (window < 0)
    std::snprintf(why, sizeof why, "%s: window=%d must be 0 (every earlier position) or positive", op, window);
  else if ((static_cast<long long>(NH) + 2LL * NKV) * HD > 0x7fffffffLL)
    std::snprintf(why, sizeof why, "%s: a qkv row of (NH+2*NKV)*HD=%lld elements exceeds 2^31-1", op,
                  (static_cast<long long>(NH) + 2LL * NKV) * HD);
  return why;
}

// attention_forward/backward's checks, before any pointer is looked at.
inline std::string check_args(const char* op, int B, int T, int NH, int NKV, int HD, int window) {
  if (B <= 0 || T <= 0) {
    char why[96];
    std::snprintf(why, sizeof why, "%s: B=%d T=%d must be positive", op, B, T);
    return why;
  }
  return check_heads(op, NH, NKV, HD, window);
}

// attention_kv_cached's checks, before any pointer is looked at.
inline std::string check_cached_args(int B, int Tq, int pos, int maxT, int NH, int NKV, int HD, int window) {
  const char* op = "attention_kv_cached";
  char why[128] = "";
  if (B <= 0 || Tq <= 0 || maxT <= 0)
    std::snprintf(why, sizeof why, "%s: B=%d Tq=%d maxT=%d must be positive", op, B, Tq, maxT);
  else if (pos < 0 || static_cast<long long>(pos) + Tq > maxT)  // pos + Tq may pass INT_MAX
    std::snprintf(why, sizeof why, "%s: positions [%d, %lld) do not fit the cache of %d", op, pos,
                  static_cast<long long>(pos) + Tq, maxT);
  else
    return check_heads(op, NH, NKV, HD, window);
  return why;
}

}  // namespace nfn::attention
