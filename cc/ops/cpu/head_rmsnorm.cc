// RMSNorm of each head vector on the CPU (f32): head_rmsnorm_forward, nanochat's QK-norm on
// the q and k heads of fused qkv rows, and its backward from the forward's output. A thread
// takes whole head vectors.
#include <cmath>
#include <string>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/reduce_math.h"
#include "cc/ops/norm_args.h"

namespace {

// f(v, o) for every head vector v = n*H + h, o the offset of its first channel (n*stride + h*D),
// whole vectors a thread.
template <typename F>
void for_each_head(int N, int H, int D, int stride, F&& f) {
  const long heads = static_cast<long>(N) * H;
#pragma omp parallel for schedule(static) if (heads * D > 4096)
  for (long v = 0; v < heads; ++v) f(v, static_cast<size_t>(v / H) * stride + static_cast<size_t>(v % H) * D);
}

}  // namespace

extern "C" {

nfn_status nfn_head_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp, int N, int H, int D,
                                    int stride, float scale, float eps, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "head_rmsnorm_forward", dtype));
  const std::string why = nfn::norm::check_head_forward(out, rstd, inp, N, H, D, stride, scale, eps);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const float* x = static_cast<const float*>(inp);
  float* y = static_cast<float*>(out);
  for_each_head(N, H, D, stride, [&](long v, size_t o) {
    const float r = 1.f / std::sqrt(nfn::cpu::row_dot(x + o, x + o, D) / D + eps);
    for (int c = 0; c < D; ++c) y[o + c] = x[o + c] * r * scale;  // y may be x: read, then written
    rstd[v] = r;
  });
  return NFN_OK;
}

nfn_status nfn_head_rmsnorm_backward(nfn_ctx* ctx, void* dinp, const void* dout, const void* out, const float* rstd,
                                     int N, int H, int D, int stride, float scale, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "head_rmsnorm_backward", dtype));
  const std::string why = nfn::norm::check_head_backward(dinp, dout, out, rstd, N, H, D, stride, scale);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const float* g = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dinp);
  for_each_head(N, H, D, stride, [&](long v, size_t o) {
    // With xh = out / scale: dinp = scale r (dout - xh m), m = mean(xh dout) = dot(out, dout) / (scale D).
    const float r = rstd[v], m = nfn::cpu::row_dot(y + o, g + o, D) / (scale * D);
    for (int c = 0; c < D; ++c) dx[o + c] = r * (scale * g[o + c] - y[o + c] * m);  // dx may be g
  });
  return NFN_OK;
}

}  // extern "C"
