// RMSNorm forward and backward on the CPU (f32), the caller's eps, 1/rms saved per row.
#include <cmath>
#include <string>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/reduce_math.h"
#include "cc/ops/cpu/row_reduce.h"
#include "cc/ops/norm_args.h"

extern "C" {

nfn_status nfn_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp,
                               const void* weight, int N, int C, float eps, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "rmsnorm_forward", dtype));
  NFN_REQUIRE(N > 0 && C > 0, "rmsnorm_forward: N=%d C=%d must be positive", N, C);
  NFN_REQUIRE(out && rstd && inp, "rmsnorm_forward: null pointer");
  const std::string why = nfn::norm::check_eps("rmsnorm_forward", eps);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const float* x = static_cast<const float*>(inp);
  const float* w = static_cast<const float*>(weight);
  float* y = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* xi = x + static_cast<size_t>(i) * C;
    float* yi = y + static_cast<size_t>(i) * C;
    const float ss = nfn::cpu::row_dot(xi, xi, C);
    const float r = 1.f / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) yi[c] = xi[c] * r * (w ? w[c] : 1.f);
    rstd[i] = r;
  }
  return NFN_OK;
}

nfn_status nfn_rmsnorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int N,
                                int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "rmsnorm_backward", dtype));
  NFN_REQUIRE(N > 0 && C > 0, "rmsnorm_backward: N=%d C=%d must be positive", N, C);
  NFN_REQUIRE(dinp && dout && inp && rstd, "rmsnorm_backward: null pointer");
  NFN_REQUIRE(weight != nullptr || dweight == nullptr,
              "rmsnorm_backward: dweight given but weight is NULL");
  const float* g = static_cast<const float*>(dout);
  const float* x = static_cast<const float*>(inp);
  const float* w = static_cast<const float*>(weight);
  float* dx = static_cast<float*>(dinp);
  float* outs[1] = {static_cast<float*>(dweight)};
  nfn::cpu::reduce_rows_into(N, C, outs, 1, [&](long i, float* partial) {
    const float* gi = g + i * C;
    const float* xi = x + i * C;
    float* dxi = dx + i * C;
    const float r = rstd[i];
    // dinp = r * (dout*w - x * r^2 * mean(dout * w * x))
    const float dot = w ? nfn::cpu::row_dot3(gi, w, xi, C) : nfn::cpu::row_dot(gi, xi, C);
    const float k = r * r * dot / C;
    for (int c = 0; c < C; ++c) {
      dxi[c] += r * (gi[c] * (w ? w[c] : 1.f) - xi[c] * k);
      partial[c] += gi[c] * xi[c] * r;
    }
  });
  return NFN_OK;
}

}  // extern "C"
