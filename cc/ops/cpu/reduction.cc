// Reductions on the CPU, accumulated in double so the CPU result is the reference.
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

extern "C" {

nfn_status nfn_sum_squares_many(nfn_ctx* ctx, const void* const* host_bufs,
                                const size_t* host_counts, int nbufs, nfn_dtype dtype,
                                float* out) {
  if (out == nullptr || (nbufs > 0 && (host_bufs == nullptr || host_counts == nullptr)))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: null pointer");
  if (dtype != NFN_F32 && dtype != NFN_BF16)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "sum_squares_many: unknown dtype %d",
                static_cast<int>(dtype));
  double total = 0.0;
  for (int b = 0; b < nbufs; ++b) {
    const size_t n = host_counts[b];
    double s = 0.0;
    if (dtype == NFN_F32) {
      const float* x = static_cast<const float*>(host_bufs[b]);
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > (1 << 16))
      for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    } else {
      const uint16_t* x = static_cast<const uint16_t*>(host_bufs[b]);
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > (1 << 16))
      for (size_t i = 0; i < n; ++i) {
        double v = nfn::cpu::bf16_to_f32(x[i]);
        s += v * v;
      }
    }
    total += s;
  }
  *out = static_cast<float>(total);
  return NFN_OK;
}

}  // extern "C"
