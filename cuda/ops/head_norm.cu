// RMSNorm of each head vector (nanochat's QK-norm): head_rmsnorm_forward, and its backward from
// the forward's output. A group of G lanes owns a head vector, G the power of two that covers
// its packs (at most 32: a bf16 head of 128 is 16 packs, two heads a warp), so a short head
// leaves no lanes idle; statistics are f32, summed over the group with shuffles. Vectors move
// 16 bytes a load where the head, the row stride and the pointers allow it, an element a load
// otherwise. Each lane writes only what it read itself, so in place is safe.
#include <initializer_list>
#include <string>

#include "cc/ops/norm_args.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::aligned16;
using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;

namespace {

constexpr int kThreads = 256;

struct HeadShape {
  size_t vectors;  // N * H
  int H, D, stride;
  int group;  // lanes a vector: a power of two, at most 32
  float scale, eps;  // eps: the forward's only
};

// This thread's place: the vector v (head v % H of row v / H) its group of lanes owns, where
// that vector starts, and its lane in the group. Groups past the last vector are not `live`
// (they still take part in their warp's shuffles).
struct HeadLane {
  size_t v, off;
  int lane;
  bool live;
  __device__ __forceinline__ explicit HeadLane(const HeadShape& s) {
    const size_t thread = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    v = thread / s.group, lane = static_cast<int>(thread % s.group), live = v < s.vectors;
    off = live ? (v / s.H) * static_cast<size_t>(s.stride) + (v % s.H) * static_cast<size_t>(s.D) : 0;
  }
};

// Sum over the `group` lanes (a power of two) that hold one vector; every lane of the warp
// takes part, whether its group has a vector or not.
__device__ __forceinline__ float group_sum(float v, int group) {
  for (int off = group / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// f(i) for each pack i of V elements of this lane's vector that the lane loads (its lane,
// lane + group, ...); nothing for a group that is not live.
template <int V, typename F>
__device__ __forceinline__ void lane_packs(const HeadLane& at, const HeadShape& s, F&& f) {
  if (!at.live) return;
  for (int i = at.lane; i < s.D / V; i += s.group) f(i);
}

// out = x * r * scale, r = 1/sqrt(mean(x^2) + eps), rstd[v] = r; V elements a load.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) head_norm_forward_kernel(T* out, float* rstd, const T* inp, HeadShape s) {
  nfn::cuda::pdl_begin();
  const HeadLane at(s);
  const T* x = inp + at.off;
  float sq = 0.f;
  lane_packs<V>(at, s, [&](int i) {
    float v[V];
    load_pack<V>(x, i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) sq += v[j] * v[j];
  });
  const float r = rsqrtf(group_sum(sq, s.group) / s.D + s.eps);
  lane_packs<V>(at, s, [&](int i) {  // the lane's packs again, from L1
    float v[V];
    load_pack<V>(x, i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * r * s.scale;
    store_pack<V>(out + at.off, i, v);
  });
  if (at.live && at.lane == 0) rstd[at.v] = r;
}

// With y the forward's output and m = dot(y, dout) / (scale D) (mean(xh dout), xh = y / scale):
// dinp = r (scale dout - y m), which is scale r (dout - xh m). V elements a load.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    head_norm_backward_kernel(T* dinp, const T* dout, const T* out, const float* rstd, HeadShape s) {
  nfn::cuda::pdl_begin();
  const HeadLane at(s);
  const T *y = out + at.off, *g = dout + at.off;
  float dot = 0.f;
  lane_packs<V>(at, s, [&](int i) {
    float yv[V], gv[V];
    load_pack<V>(y, i, yv);
    load_pack<V>(g, i, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) dot += yv[j] * gv[j];
  });
  const float m = group_sum(dot, s.group) / (s.scale * s.D);
  const float r = at.live ? rstd[at.v] : 0.f;
  lane_packs<V>(at, s, [&](int i) {
    float yv[V], gv[V];
    load_pack<V>(y, i, yv);
    load_pack<V>(g, i, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = r * (s.scale * gv[j] - yv[j] * m);
    store_pack<V>(dinp + at.off, i, gv);
  });
}

// The lanes a vector of `packs` loads: the power of two that covers them, at most a warp.
int group_lanes(int packs) {
  int g = 1;
  while (g < packs && g < 32) g *= 2;
  return g;
}

// Whether vectors of s move as Pack<E> (16 bytes a load): D and the row stride whole numbers
// of packs and every tensor aligned.
template <typename E>
bool packed_heads(const HeadShape& s, std::initializer_list<const void*> tensors) {
  return s.D % Pack<E>::n == 0 && s.stride % Pack<E>::n == 0 && aligned16(tensors);
}

// Sets s.group for vectors loaded V elements at a time; returns the grid of kThreads blocks.
dim3 plan(HeadShape& s, int V) {
  s.group = group_lanes(s.D / V);
  return dim3(static_cast<unsigned>((s.vectors * s.group + kThreads - 1) / kThreads));
}

template <typename E>
void launch_forward(nfn_ctx* ctx, E* out, float* rstd, const E* inp, HeadShape s) {
  constexpr int V = Pack<E>::n;
  if (packed_heads<E>(s, {out, inp})) {
    const dim3 grid = plan(s, V);
    nfn::cuda::launch_kernel(ctx, head_norm_forward_kernel<E, V>, grid, kThreads, 0, out, rstd, inp, s);
  } else {
    const dim3 grid = plan(s, 1);
    nfn::cuda::launch_kernel(ctx, head_norm_forward_kernel<E, 1>, grid, kThreads, 0, out, rstd, inp, s);
  }
}

template <typename E>
void launch_backward(nfn_ctx* ctx, E* dinp, const E* dout, const E* out, const float* rstd, HeadShape s) {
  constexpr int V = Pack<E>::n;
  if (packed_heads<E>(s, {dinp, dout, out})) {
    const dim3 grid = plan(s, V);
    nfn::cuda::launch_kernel(ctx, head_norm_backward_kernel<E, V>, grid, kThreads, 0, dinp, dout, out, rstd, s);
  } else {
    const dim3 grid = plan(s, 1);
    nfn::cuda::launch_kernel(ctx, head_norm_backward_kernel<E, 1>, grid, kThreads, 0, dinp, dout, out, rstd, s);
  }
}

}  // namespace

extern "C" {

nfn_status nfn_head_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp, int N, int H, int D,
                                    int stride, float scale, float eps, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "head_rmsnorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::norm::check_head_forward(out, rstd, inp, N, H, D, stride, scale, eps);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  const HeadShape shape{static_cast<size_t>(N) * H, H, D, stride, 0, scale, eps};
  NFN_DISPATCH(dtype, E,
               launch_forward(ctx, static_cast<E*>(out), rstd, static_cast<const E*>(inp), shape));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

nfn_status nfn_head_rmsnorm_backward(nfn_ctx* ctx, void* dinp, const void* dout, const void* out, const float* rstd,
                                     int N, int H, int D, int stride, float scale, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "head_rmsnorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why = nfn::norm::check_head_backward(dinp, dout, out, rstd, N, H, D, stride, scale);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  const HeadShape shape{static_cast<size_t>(N) * H, H, D, stride, 0, scale, 0.f};
  NFN_DISPATCH(dtype, E,
               launch_backward(ctx, static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(out),
                               rstd, shape));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // extern "C"
