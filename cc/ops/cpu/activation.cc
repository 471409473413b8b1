// GELU (tanh form) and the fused residual add on the CPU (f32).
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gelu.h"

extern "C" {

nfn_status nfn_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "gelu_forward", dtype));
  NFN_REQUIRE((out && inp) || n == 0, "gelu_forward: null pointer");
  float* y = static_cast<float*>(out);
  const float* x = static_cast<const float*>(inp);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) y[i] = nfn::cpu::gelu(x[i]);
  return NFN_OK;
}

nfn_status nfn_gelu_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n,
                             nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "gelu_backward", dtype));
  NFN_REQUIRE((dinp && pre && dout) || n == 0, "gelu_backward: null pointer");
  float* dx = static_cast<float*>(dinp);
  const float* x = static_cast<const float*>(pre);
  const float* g = static_cast<const float*>(dout);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) dx[i] = g[i] * nfn::cpu::gelu_grad(x[i]);
  return NFN_OK;
}

nfn_status nfn_residual_forward(nfn_ctx* ctx, void* out, const void* residual, const void* inp,
                                const void* bias, int N, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "residual_forward", dtype));
  NFN_REQUIRE(N > 0 && C > 0, "residual_forward: N=%d C=%d must be positive", N, C);
  NFN_REQUIRE(out && residual && inp, "residual_forward: null pointer");
  float* y = static_cast<float*>(out);
  const float* r = static_cast<const float*>(residual);
  const float* x = static_cast<const float*>(inp);
  const float* b = static_cast<const float*>(bias);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * C > 4096)
  for (int i = 0; i < N; ++i) {
    const size_t o = static_cast<size_t>(i) * C;
    if (b != nullptr) {
      for (int c = 0; c < C; ++c) y[o + c] = r[o + c] + x[o + c] + b[c];
    } else {
      for (int c = 0; c < C; ++c) y[o + c] = r[o + c] + x[o + c];
    }
  }
  return NFN_OK;
}

}  // extern "C"
