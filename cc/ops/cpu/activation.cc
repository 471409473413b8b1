// GELU (tanh form), ReLU², SwiGLU, tanh soft-capping and the fused residual add on the CPU (f32).
#include <cmath>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/gelu.h"

namespace {

// sigmoid(g) from fast_exp (whose clamp keeps it finite for any g).
inline float sigmoid(float g) { return 1.f / (1.f + nfn::cpu::fast_exp(-g)); }

// One cap for softcap_forward/backward: positive and finite (a NaN cap fails too).
nfn_status check_cap(nfn_ctx* ctx, const char* op, float cap) {
  NFN_REQUIRE(cap > 0.f && !std::isinf(cap), "%s: cap=%g must be positive and finite", op,
              static_cast<double>(cap));
  return NFN_OK;
}

}  // namespace

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

nfn_status nfn_relu_squared_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n,
                                    nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "relu_squared_forward", dtype));
  NFN_REQUIRE((out && inp) || n == 0, "relu_squared_forward: null out or inp");
  float* y = static_cast<float*>(out);
  const float* x = static_cast<const float*>(inp);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) {
    const float r = x[i] > 0.f ? x[i] : 0.f;
    y[i] = r * r;
  }
  return NFN_OK;
}

nfn_status nfn_relu_squared_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout,
                                     size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "relu_squared_backward", dtype));
  NFN_REQUIRE((dinp && pre && dout) || n == 0, "relu_squared_backward: null dinp, pre or dout");
  float* dx = static_cast<float*>(dinp);
  const float* x = static_cast<const float*>(pre);
  const float* g = static_cast<const float*>(dout);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) dx[i] = g[i] * (x[i] > 0.f ? 2.f * x[i] : 0.f);
  return NFN_OK;
}

nfn_status nfn_swiglu_forward(nfn_ctx* ctx, void* out, const void* inp, int N, int H, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "swiglu_forward", dtype));
  NFN_REQUIRE(N > 0 && H > 0, "swiglu_forward: N=%d H=%d must be positive", N, H);
  NFN_REQUIRE(out && inp, "swiglu_forward: null out or inp");
  float* y = static_cast<float*>(out);
  const float* x = static_cast<const float*>(inp);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * H > 4096)
  for (int i = 0; i < N; ++i) {
    const float* gate = x + 2 * static_cast<size_t>(i) * H;
    const float* up = gate + H;
    float* yi = y + static_cast<size_t>(i) * H;
    for (int c = 0; c < H; ++c) yi[c] = gate[c] * sigmoid(gate[c]) * up[c];
  }
  return NFN_OK;
}

nfn_status nfn_swiglu_backward(nfn_ctx* ctx, void* dinp, const void* inp, const void* dout, int N, int H,
                               nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "swiglu_backward", dtype));
  NFN_REQUIRE(N > 0 && H > 0, "swiglu_backward: N=%d H=%d must be positive", N, H);
  NFN_REQUIRE(dinp && inp && dout, "swiglu_backward: null dinp, inp or dout");
  float* dx = static_cast<float*>(dinp);
  const float* x = static_cast<const float*>(inp);
  const float* g = static_cast<const float*>(dout);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * H > 4096)
  for (int i = 0; i < N; ++i) {
    const size_t row = 2 * static_cast<size_t>(i) * H;
    const float* gi = g + static_cast<size_t>(i) * H;
    for (int c = 0; c < H; ++c) {
      const float gate = x[row + c], up = x[row + H + c], s = sigmoid(gate);
      // silu'(g) = s (1 + g (1 - s)); both inputs are read before dinp (maybe inp) is written
      dx[row + c] = gi[c] * up * s * (1.f + gate * (1.f - s));
      dx[row + H + c] = gi[c] * gate * s;
    }
  }
  return NFN_OK;
}

nfn_status nfn_softcap_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, float cap,
                               nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "softcap_forward", dtype));
  NFN_RETURN_IF_ERROR(check_cap(ctx, "softcap_forward", cap));
  NFN_REQUIRE((out && inp) || n == 0, "softcap_forward: null out or inp");
  float* y = static_cast<float*>(out);
  const float* x = static_cast<const float*>(inp);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) y[i] = cap * nfn::cpu::precise_tanh(x[i] / cap);
  return NFN_OK;
}

nfn_status nfn_softcap_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n,
                                float cap, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "softcap_backward", dtype));
  NFN_RETURN_IF_ERROR(check_cap(ctx, "softcap_backward", cap));
  NFN_REQUIRE((dinp && pre && dout) || n == 0, "softcap_backward: null dinp, pre or dout");
  float* dx = static_cast<float*>(dinp);
  const float* x = static_cast<const float*>(pre);
  const float* g = static_cast<const float*>(dout);
#pragma omp parallel for schedule(static) if (n > 4096)
  for (size_t i = 0; i < n; ++i) dx[i] = g[i] * nfn::cpu::tanh_grad(x[i] / cap);
  return NFN_OK;
}

}  // extern "C"
