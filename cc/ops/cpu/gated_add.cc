// gated_add_forward/backward on the CPU (f32): out += scale L sigmoid(gin . w_h) add, per row
// and head. The backward first finds each (row, head)'s gate terms, then adds dadd's terms,
// then dgin's (each pass over whole rows, so dgin and dadd may share a buffer), then sums dw
// and dlam over the rows (row_reduce.h: the same bits for a given thread count).
#include <cmath>
#include <string>
#include <vector>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/reduce_math.h"
#include "cc/ops/cpu/row_reduce.h"
#include "cc/ops/mix_args.h"

namespace {

// The arguments both directions share, as the op's tensors and strides.
struct Gate {
  const float* gin;
  const float* w;
  const float* add;
  float L, scale;
  int N, T, H, D, G, shift, out_stride, gin_stride, add_stride;

  bool adds(long n) const { return n % T >= shift; }
  // sigmoid(z) of row n's head h (z = gin[n, :G] . w[h, :]).
  float gate(long n, int h) const {
    const float z = nfn::cpu::row_dot(gin + n * gin_stride, w + static_cast<size_t>(h) * G, G);
    return 1.f / (1.f + std::exp(-z));
  }
  const float* add_row(long n, int h) const { return add + (n - shift) * add_stride + static_cast<size_t>(h) * D; }
};

nfn_status check(nfn_ctx* ctx, const char* op, const char* pointers, bool given, int N, int T, int H, int D, int G,
                 int shift, int out_stride, int gin_stride, int add_stride, float scale, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  const std::string why = nfn::mix::check_gated_add(op, pointers, given, N, T, H, D, G, shift, out_stride,
                                                    gin_stride, add_stride, scale);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  return NFN_OK;
}

bool parallel(const Gate& s) { return static_cast<long>(s.N) * s.H * s.D > 4096; }

}  // namespace

extern "C" {

nfn_status nfn_gated_add_forward(nfn_ctx* ctx, void* out, const void* gin, const void* w, const void* lam,
                                 const void* add, int N, int T, int H, int D, int G, int shift, int out_stride,
                                 int gin_stride, int add_stride, float scale, nfn_dtype dtype) {
  NFN_RETURN_IF_ERROR(check(ctx, "gated_add_forward", "out, gin, w or add", out && gin && w && add, N, T, H, D, G,
                            shift, out_stride, gin_stride, add_stride, scale, dtype));
  const Gate s{static_cast<const float*>(gin), static_cast<const float*>(w), static_cast<const float*>(add),
               lam ? *static_cast<const float*>(lam) : 1.f, scale, N, T, H, D, G, shift, out_stride, gin_stride,
               add_stride};
  float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static) if (parallel(s))
  for (long n = 0; n < N; ++n) {
    if (!s.adds(n)) continue;
    for (int h = 0; h < H; ++h) {
      const float c = s.scale * s.L * s.gate(n, h);
      const float* a = s.add_row(n, h);
      float* y = o + n * out_stride + static_cast<size_t>(h) * D;
      for (int d = 0; d < D; ++d) y[d] += c * a[d];
    }
  }
  return NFN_OK;
}

nfn_status nfn_gated_add_backward(nfn_ctx* ctx, void* dgin, void* dw, void* dlam, void* dadd, const void* dout,
                                  const void* gin, const void* w, const void* lam, const void* add, int N, int T,
                                  int H, int D, int G, int shift, int out_stride, int gin_stride, int add_stride,
                                  float scale, nfn_dtype dtype) {
  NFN_RETURN_IF_ERROR(check(ctx, "gated_add_backward", "dout, gin, w or add", dout && gin && w && add, N, T, H, D, G,
                            shift, out_stride, gin_stride, add_stride, scale, dtype));
  const Gate s{static_cast<const float*>(gin), static_cast<const float*>(w), static_cast<const float*>(add),
               lam ? *static_cast<const float*>(lam) : 1.f, scale, N, T, H, D, G, shift, out_stride, gin_stride,
               add_stride};
  const float* g = static_cast<const float*>(dout);
  // Per (row, head): c, dz and (c / L) S; zero for the rows the forward leaves alone.
  const size_t items = static_cast<size_t>(N) * H;
  std::vector<float> c(items, 0.f), dz(items, 0.f), dl(items, 0.f);
#pragma omp parallel for schedule(static) if (parallel(s))
  for (long n = 0; n < N; ++n) {
    if (!s.adds(n)) continue;
    for (int h = 0; h < H; ++h) {
      const float sg = s.gate(n, h);
      const float S = nfn::cpu::row_dot(g + n * out_stride + static_cast<size_t>(h) * D, s.add_row(n, h), D);
      const size_t i = static_cast<size_t>(n) * H + h;
      c[i] = s.scale * s.L * sg;
      dz[i] = S * s.scale * s.L * sg * (1.f - sg);
      dl[i] = s.scale * sg * S;
    }
  }
  if (dadd) {
    float* da = static_cast<float*>(dadd);
#pragma omp parallel for schedule(static) if (parallel(s))
    for (long n = shift; n < N; ++n) {
      if (!s.adds(n)) continue;
      for (int h = 0; h < H; ++h) {
        const float ch = c[static_cast<size_t>(n) * H + h];
        const float* gr = g + n * out_stride + static_cast<size_t>(h) * D;
        float* dr = da + (n - shift) * add_stride + static_cast<size_t>(h) * D;
        for (int d = 0; d < D; ++d) dr[d] += ch * gr[d];
      }
    }
  }
  if (dgin) {
    float* di = static_cast<float*>(dgin);
#pragma omp parallel for schedule(static) if (parallel(s))
    for (long n = 0; n < N; ++n) {
      if (!s.adds(n)) continue;
      const float* dzn = dz.data() + static_cast<size_t>(n) * H;
      for (int k = 0; k < G; ++k) {
        float acc = 0.f;
        for (int h = 0; h < H; ++h) acc += dzn[h] * s.w[static_cast<size_t>(h) * G + k];
        di[n * gin_stride + k] += acc;
      }
    }
  }
  if (dw || dlam) {
    // Columns [0, H*G) are dw's, column H*G dlam's.
    const int HG = H * G;
    std::vector<float> sums(static_cast<size_t>(HG) + 1, 0.f);
    float* outs[1] = {sums.data()};
    nfn::cpu::reduce_rows_into(N, HG + 1, outs, 1, [&](long n, float* partial) {
      const float* dzn = dz.data() + static_cast<size_t>(n) * H;
      const float* x = s.gin + n * gin_stride;
      for (int h = 0; h < H; ++h) {
        for (int k = 0; k < G; ++k) partial[h * G + k] += dzn[h] * x[k];
        partial[HG] += dl[static_cast<size_t>(n) * H + h];
      }
    });
    if (dw)
      for (int j = 0; j < HG; ++j) static_cast<float*>(dw)[j] += sums[j];
    if (dlam) *static_cast<float*>(dlam) += sums[HG];
  }
  return NFN_OK;
}

}  // extern "C"
