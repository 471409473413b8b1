// gated_add_forward/backward: out += scale L sigmoid(gin . w_h) add, per row and head. A warp
// owns a (row, head) item: its lanes split the gate's G-long dot product and the head's D
// channels, 16 bytes a load where D, the strides and the pointers allow it (Pack).
//
// The backward runs four kernels, in this order: the gate terms of every item (c, dz and
// (c / L) S, f32 in scratch); dadd's terms; dgin's (so dgin and dadd may share a buffer: the
// smear's gin and add are the same rows); then dw's and dlam's sums over row slices into f32
// partials, which add_partials (column_reduce.cuh) adds in slice order. No atomics: the same
// bits every run.
#include <initializer_list>
#include <string>

#include "cc/ops/mix_args.h"
#include "cuda/ops/column_reduce.cuh"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;
using nfn::cuda::to_f32;

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

struct GateShape {
  int N, T, H, D, G, shift, out_stride, gin_stride, add_stride;
  float scale;
  __device__ bool adds(int n) const { return n % T >= shift; }
};

// sigmoid(gin[n, :G] . w[h, :]), the same bits in every lane of the warp.
template <typename T>
__device__ __forceinline__ float gate(const T* gin, const T* w, const GateShape& s, int n, int h, int lane) {
  const T* x = gin + static_cast<size_t>(n) * s.gin_stride;
  const T* wh = w + static_cast<size_t>(h) * s.G;
  float z = 0.f;
  for (int k = lane; k < s.G; k += 32) z += to_f32(x[k]) * to_f32(wh[k]);
  z = nfn::cuda::warp_sum(z);
  return 1.f / (1.f + expf(-z));
}

// A warp an item (row n, head h) of N * H, grid-strided.
#define FOR_EACH_ITEM(item, s)                                                                        \
  for (size_t item = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;               \
       item < static_cast<size_t>((s).N) * (s).H; item += static_cast<size_t>(gridDim.x) * kWarps)

// out[n, h, :] += scale L sigmoid(z) add[n - shift, h, :], D / V packs of V a head.
template <typename T, int V>
__global__ void gated_add_forward_kernel(T* out, const T* gin, const T* w, const T* lam, const T* add, GateShape s) {
  nfn::cuda::pdl_begin();
  const int lane = threadIdx.x & 31;
  const float L = lam != nullptr ? to_f32(*lam) : 1.f;
  FOR_EACH_ITEM(item, s) {
    const int n = static_cast<int>(item / s.H), h = static_cast<int>(item % s.H);
    if (!s.adds(n)) continue;
    const float c = s.scale * L * gate(gin, w, s, n, h, lane);
    const T* a = add + static_cast<size_t>(n - s.shift) * s.add_stride + static_cast<size_t>(h) * s.D;
    T* o = out + static_cast<size_t>(n) * s.out_stride + static_cast<size_t>(h) * s.D;
    for (int p = lane; p < s.D / V; p += 32) {
      float av[V], ov[V];
      load_pack<V>(a, p, av);
      load_pack<V>(o, p, ov);
#pragma unroll
      for (int k = 0; k < V; ++k) ov[k] += c * av[k];
      store_pack<V>(o, p, ov);
    }
  }
}

// Per item: c = scale L s, dz = S scale L s (1 - s) and dl = (c / L) S, with S = dout[n, h, :] .
// add[n - shift, h, :]; all 0 for a row the forward leaves alone.
template <typename T, int V>
__global__ void gated_add_terms_kernel(const T* dout, const T* gin, const T* w, const T* lam, const T* add,
                                       GateShape s, float* c, float* dz, float* dl) {
  nfn::cuda::pdl_begin();
  const int lane = threadIdx.x & 31;
  const float L = lam != nullptr ? to_f32(*lam) : 1.f;
  FOR_EACH_ITEM(item, s) {
    const int n = static_cast<int>(item / s.H), h = static_cast<int>(item % s.H);
    float ci = 0.f, dzi = 0.f, dli = 0.f;
    if (s.adds(n)) {
      const float sg = gate(gin, w, s, n, h, lane);
      const T* a = add + static_cast<size_t>(n - s.shift) * s.add_stride + static_cast<size_t>(h) * s.D;
      const T* g = dout + static_cast<size_t>(n) * s.out_stride + static_cast<size_t>(h) * s.D;
      float S = 0.f;
      for (int p = lane; p < s.D / V; p += 32) {
        float av[V], gv[V];
        load_pack<V>(a, p, av);
        load_pack<V>(g, p, gv);
#pragma unroll
        for (int k = 0; k < V; ++k) S += gv[k] * av[k];
      }
      S = nfn::cuda::warp_sum(S);
      ci = s.scale * L * sg;
      dzi = S * s.scale * L * sg * (1.f - sg);
      dli = s.scale * sg * S;
    }
    if (lane == 0) {
      c[item] = ci;
      dz[item] = dzi;
      dl[item] = dli;
    }
  }
}

// dadd[n - shift, h, :] += c dout[n, h, :], a thread a pack of V; rows n map to distinct rows.
template <typename T, int V>
__global__ void gated_add_dadd_kernel(T* dadd, const T* dout, const float* c, GateShape s) {
  nfn::cuda::pdl_begin();
  const int packs = s.D / V;
  const size_t total = static_cast<size_t>(s.N) * s.H * packs;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t item = i / packs;
    const int p = static_cast<int>(i % packs), n = static_cast<int>(item / s.H), h = static_cast<int>(item % s.H);
    if (!s.adds(n)) continue;
    float gv[V], dv[V];
    load_pack<V>(dout + static_cast<size_t>(n) * s.out_stride + static_cast<size_t>(h) * s.D, p, gv);
    T* dst = dadd + static_cast<size_t>(n - s.shift) * s.add_stride + static_cast<size_t>(h) * s.D;
    load_pack<V>(dst, p, dv);
#pragma unroll
    for (int k = 0; k < V; ++k) dv[k] += c[item] * gv[k];
    store_pack<V>(dst, p, dv);
  }
}

// dgin[n, g] += sum_h dz[n, h] w[h, g], heads in order, a thread an element.
template <typename T>
__global__ void gated_add_dgin_kernel(T* dgin, const T* w, const float* dz, GateShape s) {
  nfn::cuda::pdl_begin();
  const size_t total = static_cast<size_t>(s.N) * s.G;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int n = static_cast<int>(i / s.G), g = static_cast<int>(i % s.G);
    if (!s.adds(n)) continue;
    float acc = 0.f;
    for (int h = 0; h < s.H; ++h) acc += dz[static_cast<size_t>(n) * s.H + h] * to_f32(w[h * s.G + g]);
    T* dst = dgin + static_cast<size_t>(n) * s.gin_stride + g;
    *dst = nfn::cuda::from_f32<T>(to_f32(*dst) + acc);
  }
}

// Column j < H*G of a slice: sum over its rows of dz[n, j / G] gin[n, j % G] into
// partials_w[slice][j]; column H*G: the sum of dl over its rows and heads into
// partials_l[slice]. Blocks of kColumnTile columns by kRowThreads row threads, added in order.
template <typename T>
__global__ void gated_add_param_partials_kernel(const T* gin, const float* dz, const float* dl, GateShape s,
                                                float* partials_w, float* partials_l) {
  nfn::cuda::pdl_begin();
  using nfn::cuda::kColumnTile;
  using nfn::cuda::kRowThreads;
  const int HG = s.H * s.G, j = blockIdx.x * kColumnTile + threadIdx.x, slices = gridDim.y;
  const int h = j / s.G, g = j % s.G;  // dw's (h, g) where j < HG
  float acc = 0.f;
  if (j <= HG)
    for (int n = blockIdx.y * kRowThreads + threadIdx.y; n < s.N; n += slices * kRowThreads) {
      const size_t item = static_cast<size_t>(n) * s.H;
      if (j < HG)
        acc += dz[item + h] * to_f32(gin[static_cast<size_t>(n) * s.gin_stride + g]);
      else
        for (int k = 0; k < s.H; ++k) acc += dl[item + k];
    }
  __shared__ float sums[kRowThreads][kColumnTile];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || j > HG) return;
  float total = 0.f;
  for (int y = 0; y < kRowThreads; ++y) total += sums[y][threadIdx.x];
  if (j < HG)
    partials_w[static_cast<size_t>(blockIdx.y) * HG + j] = total;
  else
    partials_l[blockIdx.y] = total;
}

// Whether heads of D channels at these strides, in tensors that start at `tensors`, move as
// Pack<T>.
template <typename T>
bool packed(const GateShape& s, std::initializer_list<const void*> tensors) {
  constexpr int V = Pack<T>::n;
  return s.D % V == 0 && s.out_stride % V == 0 && s.add_stride % V == 0 && nfn::cuda::aligned16(tensors);
}

unsigned item_blocks(const GateShape& s) { return nfn::cuda::grid_for(static_cast<size_t>(s.N) * s.H, kWarps); }

template <typename T>
void launch_forward(nfn_ctx* ctx, T* out, const T* gin, const T* w, const T* lam, const T* add, const GateShape& s) {
  if (packed<T>(s, {out, add}))
    nfn::cuda::launch_kernel(ctx, gated_add_forward_kernel<T, Pack<T>::n>, item_blocks(s), kThreads, 0, out, gin, w,
                             lam, add, s);
  else
    nfn::cuda::launch_kernel(ctx, gated_add_forward_kernel<T, 1>, item_blocks(s), kThreads, 0, out, gin, w, lam, add,
                             s);
}

// The backward's kernels (the file's comment), in their order, in the context's scratch.
template <typename T>
nfn_status launch_backward(nfn_ctx* ctx, const char* op, T* dgin, T* dw, T* dlam, T* dadd, const T* dout,
                           const T* gin, const T* w, const T* lam, const T* add, const GateShape& s) {
  using nfn::cuda::ColumnDsts;
  using nfn::cuda::grid_for;
  constexpr int V = Pack<T>::n;
  const size_t items = static_cast<size_t>(s.N) * s.H;
  const int HG = s.H * s.G, slices = nfn::cuda::row_slices(s.N);
  const bool params = dw != nullptr || dlam != nullptr;
  const size_t partials = params ? static_cast<size_t>(slices) * (HG + 1) : 0;
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, sizeof(float) * (3 * items + partials), &buf, op));
  float *c = static_cast<float*>(buf), *dz = c + items, *dl = dz + items;
  float *partials_w = dl + items, *partials_l = partials_w + static_cast<size_t>(slices) * HG;
  const bool pack = packed<T>(s, {dout, add, dadd});
  if (pack)
    nfn::cuda::launch_kernel(ctx, gated_add_terms_kernel<T, V>, item_blocks(s), kThreads, 0, dout, gin, w, lam, add, s,
                             c, dz, dl);
  else
    nfn::cuda::launch_kernel(ctx, gated_add_terms_kernel<T, 1>, item_blocks(s), kThreads, 0, dout, gin, w, lam, add, s,
                             c, dz, dl);
  if (dadd != nullptr) {
    const unsigned grid = grid_for(items * (pack ? s.D / V : s.D), kThreads);
    if (pack)
      nfn::cuda::launch_kernel(ctx, gated_add_dadd_kernel<T, V>, grid, kThreads, 0, dadd, dout, c, s);
    else
      nfn::cuda::launch_kernel(ctx, gated_add_dadd_kernel<T, 1>, grid, kThreads, 0, dadd, dout, c, s);
  }
  if (dgin != nullptr)
    nfn::cuda::launch_kernel(ctx, gated_add_dgin_kernel<T>, grid_for(static_cast<size_t>(s.N) * s.G, kThreads),
                             kThreads, 0, dgin, w, dz, s);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  if (!params) return NFN_OK;
  const dim3 grid((HG + nfn::cuda::kColumnTile) / nfn::cuda::kColumnTile, slices),
      block(nfn::cuda::kColumnTile, nfn::cuda::kRowThreads);  // HG + 1 columns: dw's, then dlam's
  nfn::cuda::launch_kernel(ctx, gated_add_param_partials_kernel<T>, grid, block, 0, gin, dz, dl, s, partials_w,
                           partials_l);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  if (dw != nullptr) NFN_TRY(nfn::cuda::add_partials(ctx, op, ColumnDsts<T, 1>{{dw}}, partials_w, slices, HG));
  if (dlam != nullptr) NFN_TRY(nfn::cuda::add_partials(ctx, op, ColumnDsts<T, 1>{{dlam}}, partials_l, slices, 1));
  return NFN_OK;
}

// The shape, after the checks both libraries share.
nfn_status check(nfn_ctx* ctx, const char* op, const char* pointers, bool given, GateShape s, nfn_dtype dtype) {
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::mix::check_gated_add(op, pointers, given, s.N, s.T, s.H, s.D, s.G, s.shift,
                                                    s.out_stride, s.gin_stride, s.add_stride, s.scale);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_gated_add_forward(nfn_ctx* ctx, void* out, const void* gin, const void* w, const void* lam,
                                 const void* add, int N, int T, int H, int D, int G, int shift, int out_stride,
                                 int gin_stride, int add_stride, float scale, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "gated_add_forward";
  const GateShape s{N, T, H, D, G, shift, out_stride, gin_stride, add_stride, scale};
  NFN_TRY(check(ctx, op, "out, gin, w or add", out && gin && w && add, s, dtype));
  NFN_DISPATCH(dtype, E,
               launch_forward(ctx, static_cast<E*>(out), static_cast<const E*>(gin), static_cast<const E*>(w),
                              static_cast<const E*>(lam), static_cast<const E*>(add), s));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

nfn_status nfn_gated_add_backward(nfn_ctx* ctx, void* dgin, void* dw, void* dlam, void* dadd, const void* dout,
                                  const void* gin, const void* w, const void* lam, const void* add, int N, int T,
                                  int H, int D, int G, int shift, int out_stride, int gin_stride, int add_stride,
                                  float scale, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "gated_add_backward";
  const GateShape s{N, T, H, D, G, shift, out_stride, gin_stride, add_stride, scale};
  NFN_TRY(check(ctx, op, "dout, gin, w or add", dout && gin && w && add, s, dtype));
  if (dgin == nullptr && dw == nullptr && dlam == nullptr && dadd == nullptr) return NFN_OK;
  nfn_status status = NFN_OK;
  NFN_DISPATCH(dtype, E,
               status = launch_backward(ctx, op, static_cast<E*>(dgin), static_cast<E*>(dw), static_cast<E*>(dlam),
                                        static_cast<E*>(dadd), static_cast<const E*>(dout),
                                        static_cast<const E*>(gin), static_cast<const E*>(w),
                                        static_cast<const E*>(lam), static_cast<const E*>(add), s));
  return status;
}

}  // extern "C"
