// LayerNorm forward and backward on the CPU (f32), eps 1e-5, statistics saved per row.
#include <cmath>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/reduce_math.h"
#include "cc/ops/cpu/row_reduce.h"

namespace {
constexpr float kEps = 1e-5f;

// One row's dinp (accumulated) and its dweight and dbias contributions, and with kColsum
// the row of dinp as it is left (dinp_colsum's). The rows never overlap; saying so with
// restrict parameters is what lets GCC vectorize the loop (it gives up on runtime alias
// checks for seven pointers).
template <bool kColsum>
void backward_row(const float* __restrict g, const float* __restrict w, const float* __restrict x,
                  float* __restrict dx, float* __restrict pw, float* __restrict pb, float* __restrict pd,
                  int C, float m, float r, float mean_d, float mean_dx) {
  for (int c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * r;
    dx[c] += r * (g[c] * w[c] - mean_d - xhat * mean_dx);
    pw[c] += g[c] * xhat;
    pb[c] += g[c];
    if constexpr (kColsum) pd[c] += dx[c];
  }
}

}  // namespace

extern "C" {

nfn_status nfn_layernorm_forward(nfn_ctx* ctx, void* out, float* mean, float* rstd,
                                 const void* inp, const void* weight, const void* bias, int N,
                                 int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "layernorm_forward", dtype));
  NFN_REQUIRE(N > 0 && C > 0, "layernorm_forward: N=%d C=%d must be positive", N, C);
  NFN_REQUIRE(out && mean && rstd && inp && weight, "layernorm_forward: null pointer");
  const float* x = static_cast<const float*>(inp);
  const float* w = static_cast<const float*>(weight);
  const float* b = static_cast<const float*>(bias);
  float* y = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* xi = x + static_cast<size_t>(i) * C;
    float* yi = y + static_cast<size_t>(i) * C;
    const float m = nfn::cpu::row_sum(xi, C) / C;
    const float r = 1.f / std::sqrt(nfn::cpu::row_sum_sq_dev(xi, m, C) / C + kEps);
    for (int c = 0; c < C; ++c) yi[c] = (xi[c] - m) * r * w[c] + (b ? b[c] : 0.f);
    mean[i] = m;
    rstd[i] = r;
  }
  return NFN_OK;
}

nfn_status nfn_layernorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias,
                                  void* dinp_colsum, const void* dout, const void* inp,
                                  const void* weight, const float* mean, const float* rstd, int N,
                                  int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "layernorm_backward", dtype));
  NFN_REQUIRE(N > 0 && C > 0, "layernorm_backward: N=%d C=%d must be positive", N, C);
  NFN_REQUIRE(dinp && dweight && dout && inp && weight && mean && rstd,
              "layernorm_backward: null pointer");
  const float* g = static_cast<const float*>(dout);
  const float* x = static_cast<const float*>(inp);
  const float* w = static_cast<const float*>(weight);
  float* dx = static_cast<float*>(dinp);
  float* outs[3] = {static_cast<float*>(dweight), static_cast<float*>(dbias), static_cast<float*>(dinp_colsum)};
  const bool colsum = dinp_colsum != nullptr;
  nfn::cpu::reduce_rows_into(N, C, outs, colsum ? 3 : 2, [&](long i, float* partial) {
    const float* gi = g + i * C;
    const float* xi = x + i * C;
    float* dxi = dx + i * C;
    const float m = mean[i], r = rstd[i];
    // dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w
    // sum(dnorm * xhat) = r * (sum(dnorm * x) - m * sum(dnorm))
    const float sum_d = nfn::cpu::row_dot(gi, w, C);
    const float mean_d = sum_d / C;
    const float mean_dx = r * (nfn::cpu::row_dot3(gi, w, xi, C) - m * sum_d) / C;
    if (colsum)
      backward_row<true>(gi, w, xi, dxi, partial, partial + C, partial + 2 * C, C, m, r, mean_d, mean_dx);
    else
      backward_row<false>(gi, w, xi, dxi, partial, partial + C, nullptr, C, m, r, mean_d, mean_dx);
  });
  return NFN_OK;
}

}  // extern "C"
