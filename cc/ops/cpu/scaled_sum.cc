// scaled_sum_forward/backward on the CPU (f32): out = ca A x + cb B y and its gradients. The
// backward's two sums run over fixed chunks of 4096 elements whose partials are added in
// chunk order, so they have the same bits for any thread count.
#include <string>
#include <vector>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/reduce_math.h"
#include "cc/ops/mix_args.h"

namespace {

constexpr size_t kChunk = 4096;

// A learned scalar, or 1 where it is absent.
float scalar_or_one(const void* p) { return p != nullptr ? *static_cast<const float*>(p) : 1.f; }

// *dst += k * (the partials added in order).
void add_sum(void* dst, float k, const std::vector<float>& partials) {
  if (dst == nullptr) return;
  float s = 0.f;
  for (float p : partials) s += p;
  *static_cast<float*>(dst) += k * s;
}

}  // namespace

extern "C" {

nfn_status nfn_scaled_sum_forward(nfn_ctx* ctx, void* out, const void* x, const void* y, const void* a,
                                  const void* b, float ca, float cb, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "scaled_sum_forward", dtype));
  const std::string why = nfn::mix::check_scaled_sum_forward(out, x, y, ca, cb, n);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const float ka = ca * scalar_or_one(a), kb = cb * scalar_or_one(b);
  float* o = static_cast<float*>(out);
  const float* xs = static_cast<const float*>(x);
  const float* ys = static_cast<const float*>(y);
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (size_t i = 0; i < n; ++i) o[i] = ka * xs[i] + kb * ys[i];
  return NFN_OK;
}

nfn_status nfn_scaled_sum_backward(nfn_ctx* ctx, void* dx, void* dy, void* da, void* db, const void* dout,
                                   const void* x, const void* y, const void* a, const void* b, float ca, float cb,
                                   size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "scaled_sum_backward", dtype));
  const std::string why = nfn::mix::check_scaled_sum_backward(da, db, dout, x, y, ca, cb, n);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const float ka = ca * scalar_or_one(a), kb = cb * scalar_or_one(b);
  float* gx = static_cast<float*>(dx);
  float* gy = static_cast<float*>(dy);
  const float* g = static_cast<const float*>(dout);
  const float* xs = static_cast<const float*>(x);
  const float* ys = static_cast<const float*>(y);
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> sum_a(da ? chunks : 0), sum_b(db ? chunks : 0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t k = 0; k < chunks; ++k) {
    const size_t i0 = k * kChunk, len = (n - i0 < kChunk ? n - i0 : kChunk);
    // Everything that reads dout comes before dx, which may be dout, is written.
    if (da) sum_a[k] = nfn::cpu::row_dot(g + i0, xs + i0, static_cast<int>(len));
    if (db) sum_b[k] = nfn::cpu::row_dot(g + i0, ys + i0, static_cast<int>(len));
    if (gy)
      for (size_t i = i0; i < i0 + len; ++i) gy[i] += kb * g[i];
    if (gx)
      for (size_t i = i0; i < i0 + len; ++i) gx[i] = ka * g[i];
  }
  add_sum(da, ca, sum_a);
  add_sum(db, cb, sum_b);
  return NFN_OK;
}

}  // extern "C"
