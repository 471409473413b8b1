// Row softmax on the CPU: f32 probabilities over the first V of `stride` columns.
#include <cmath>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/reduce_math.h"

extern "C" {

nfn_status nfn_softmax_forward(nfn_ctx* ctx, float* out, const void* inp, int N, int V, int stride,
                               nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "softmax_forward", dtype));
  NFN_REQUIRE(N > 0 && V > 0, "softmax_forward: N=%d V=%d must be positive", N, V);
  NFN_REQUIRE(stride >= V, "softmax_forward: stride=%d is smaller than V=%d", stride, V);
  NFN_REQUIRE(out && inp, "softmax_forward: null pointer");
  const float* x = static_cast<const float*>(inp);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* xi = x + static_cast<size_t>(i) * stride;
    float* yi = out + static_cast<size_t>(i) * V;
    const float m = nfn::cpu::row_max(xi, V);
    for (int j = 0; j < V; ++j) yi[j] = nfn::cpu::fast_exp(xi[j] - m);
    const float inv = 1.f / nfn::cpu::row_sum(yi, V);
    for (int j = 0; j < V; ++j) yi[j] *= inv;
  }
  return NFN_OK;
}

}  // extern "C"
