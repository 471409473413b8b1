// scaled_sum_forward/backward: out = ca A x + cb B y and its gradients, 16 bytes a load where n
// and the pointers allow it (Pack), an element a load otherwise. The learned scalars A and B
// are read on the device, so a graph replays their current values. The backward's kernel
// writes dx and dy and leaves each block's two sums in scratch; add_partials
// (column_reduce.cuh) then adds them, in block order, to da and db: the same bits every run.
#include <algorithm>
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

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBackwardBlocks = 1024;  // partial sums a scalar gradient, at most

template <typename T>
__device__ __forceinline__ float scalar_or_one(const T* p) {
  return p != nullptr ? nfn::cuda::to_f32(*p) : 1.f;
}

// out = ca A x + cb B y over n packs of V elements; out may be x or y.
template <typename T, int V>
__global__ void scaled_sum_forward_kernel(T* out, const T* x, const T* y, const T* a, const T* b, float ca, float cb,
                                          size_t n) {
  nfn::cuda::pdl_begin();
  const float ka = ca * scalar_or_one(a), kb = cb * scalar_or_one(b);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float xs[V], ys[V];
    load_pack<V>(x, i, xs);
    load_pack<V>(y, i, ys);
#pragma unroll
    for (int k = 0; k < V; ++k) xs[k] = ka * xs[k] + kb * ys[k];
    store_pack<V>(out, i, xs);
  }
}

// Over n packs of V: dx = ca A dout, dy += cb B dout (each skipped where NULL); where partials
// is given, ca times the block's sum(dout * x) (x NULL: none) goes to partials[blockIdx.x] and
// cb times its sum(dout * y) to partials[gridDim.x + blockIdx.x]. A thread reads its dout pack
// before it writes dx, so dx may be dout.
template <typename T, int V>
__global__ void scaled_sum_backward_kernel(T* dx, T* dy, const T* dout, const T* x, const T* y, const T* a,
                                           const T* b, float ca, float cb, size_t n, float* partials) {
  nfn::cuda::pdl_begin();
  const float ka = ca * scalar_or_one(a), kb = cb * scalar_or_one(b);
  float sum_x = 0.f, sum_y = 0.f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float g[V], v[V];
    load_pack<V>(dout, i, g);
    if (x != nullptr) {
      load_pack<V>(x, i, v);
#pragma unroll
      for (int k = 0; k < V; ++k) sum_x += g[k] * v[k];
    }
    if (y != nullptr) {
      load_pack<V>(y, i, v);
#pragma unroll
      for (int k = 0; k < V; ++k) sum_y += g[k] * v[k];
    }
    if (dy != nullptr) {
      load_pack<V>(dy, i, v);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += kb * g[k];
      store_pack<V>(dy, i, v);
    }
    if (dx != nullptr) {
#pragma unroll
      for (int k = 0; k < V; ++k) g[k] *= ka;
      store_pack<V>(dx, i, g);
    }
  }
  if (partials == nullptr) return;
  __shared__ float shared[32];
  sum_x = nfn::cuda::block_sum(sum_x, shared);
  sum_y = nfn::cuda::block_sum(sum_y, shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = ca * sum_x;
    partials[gridDim.x + blockIdx.x] = cb * sum_y;
  }
}

// Whether every tensor given can move as Pack<T> over n elements.
template <typename T>
bool packed(size_t n, std::initializer_list<const void*> tensors) {
  return n % Pack<T>::n == 0 && nfn::cuda::aligned16(tensors);
}

template <typename T>
void launch_forward(nfn_ctx* ctx, T* out, const T* x, const T* y, const T* a, const T* b, float ca, float cb,
                    size_t n) {
  constexpr int V = Pack<T>::n;
  if (packed<T>(n, {out, x, y}))
    nfn::cuda::launch_kernel(ctx, scaled_sum_forward_kernel<T, V>, nfn::cuda::grid_for(n / V, kThreads), kThreads, 0,
                             out, x, y, a, b, ca, cb, n / V);
  else
    nfn::cuda::launch_kernel(ctx, scaled_sum_forward_kernel<T, 1>, nfn::cuda::grid_for(n, kThreads), kThreads, 0,
                             out, x, y, a, b, ca, cb, n);
}

// The backward's kernel, then the sums into da and db; x and y only where their sum is asked.
template <typename T>
nfn_status launch_backward(nfn_ctx* ctx, const char* op, T* dx, T* dy, T* da, T* db, const T* dout, const T* x,
                           const T* y, const T* a, const T* b, float ca, float cb, size_t n) {
  constexpr int V = Pack<T>::n;
  const T* sum_x = da != nullptr ? x : nullptr;
  const T* sum_y = db != nullptr ? y : nullptr;
  const bool pack = packed<T>(n, {dx, dy, dout, sum_x, sum_y});
  const size_t items = pack ? n / V : n;
  const unsigned grid = std::min(nfn::cuda::grid_for(items, kThreads), kMaxBackwardBlocks);
  float* partials = nullptr;
  if (da != nullptr || db != nullptr) {
    void* buf = nullptr;
    NFN_TRY(nfn::cuda::scratch(ctx, 2 * sizeof(float) * grid, &buf, op));
    partials = static_cast<float*>(buf);
  }
  if (pack)
    nfn::cuda::launch_kernel(ctx, scaled_sum_backward_kernel<T, V>, grid, kThreads, 0, dx, dy, dout, sum_x, sum_y, a,
                             b, ca, cb, items, partials);
  else
    nfn::cuda::launch_kernel(ctx, scaled_sum_backward_kernel<T, 1>, grid, kThreads, 0, dx, dy, dout, sum_x, sum_y, a,
                             b, ca, cb, items, partials);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  if (partials == nullptr) return NFN_OK;
  // partials is [2][grid] sums of one column each: da's, then db's.
  return nfn::cuda::add_partials(ctx, op, nfn::cuda::ColumnDsts<T, 2>{{da, db}}, partials, static_cast<int>(grid), 1);
}

}  // namespace

extern "C" {

nfn_status nfn_scaled_sum_forward(nfn_ctx* ctx, void* out, const void* x, const void* y, const void* a,
                                  const void* b, float ca, float cb, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "scaled_sum_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::mix::check_scaled_sum_forward(out, x, y, ca, cb, n);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  if (n == 0) return NFN_OK;
  NFN_DISPATCH(dtype, T,
               launch_forward(ctx, static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(y),
                              static_cast<const T*>(a), static_cast<const T*>(b), ca, cb, n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

nfn_status nfn_scaled_sum_backward(nfn_ctx* ctx, void* dx, void* dy, void* da, void* db, const void* dout,
                                   const void* x, const void* y, const void* a, const void* b, float ca, float cb,
                                   size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "scaled_sum_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::mix::check_scaled_sum_backward(da, db, dout, x, y, ca, cb, n);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  if (n == 0 || (dx == nullptr && dy == nullptr && da == nullptr && db == nullptr)) return NFN_OK;
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, T,
               s = launch_backward(ctx, op, static_cast<T*>(dx), static_cast<T*>(dy), static_cast<T*>(da),
                                   static_cast<T*>(db), static_cast<const T*>(dout), static_cast<const T*>(x),
                                   static_cast<const T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), ca,
                                   cb, n));
  return s;
}

}  // extern "C"
