// Rotary position embedding: rope_forward, and rope_backward, the same rotation by the
// opposite angle. A thread owns a (row, pack of P frequencies) item: it computes the P cos and
// sin once (cc/ops/rope.h, the CPU library's own function) and rotates that pack of channels in
// each head of its head group, moving 16 bytes a load where the layout allows it (P =
// Pack<T>::n), an element a load otherwise (P = 1). Heads split into groups over gridDim.y
// only where rows are few (a KV-cached step), so there are enough threads to keep loads in
// flight; in training one group holds every head.
#include <algorithm>
#include <string>

#include "cc/ops/rope.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::aligned16;
using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;

namespace {

constexpr int kMaxHalf = 128;         // frequencies a launch carries: head dims up to 256
constexpr int kThreads = 256;
constexpr size_t kTargetItems = 1 << 16;  // threads to aim for before splitting the heads

// The frequencies travel by value, as a kernel argument, so every thread reads them from the
// constant bank and the host computes them (in double, as the CPU library does) per call.
struct Frequencies {
  float inv_freq[kMaxHalf];
};

struct RopeShape {
  int T, pos_offset, stride;
  int heads, heads_per_group;  // q and k heads in all; heads a block's group covers
  int half;                    // HD / 2
  float sin_sign;              // sign for the forward, -sign for the backward
};

template <typename T, int P>
__global__ void rope_kernel(T* out, const T* inp, const Frequencies freq, const RopeShape s, size_t items) {
  nfn::cuda::pdl_begin();
  const int packs = s.half / P;
  const int h_begin = blockIdx.y * s.heads_per_group, h_end = min(s.heads, h_begin + s.heads_per_group);
  for (size_t item = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; item < items;
       item += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(item / packs), j = static_cast<int>(item % packs) * P;
    const float t = static_cast<float>(r % s.T + s.pos_offset);
    float c[P], sn[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      nfn::rope::sincos(t * freq.inv_freq[j + k], &sn[k], &c[k]);
      sn[k] *= s.sin_sign;
    }
    for (int h = h_begin; h < h_end; ++h) {
      const size_t first = (static_cast<size_t>(r) * s.stride + static_cast<size_t>(h) * 2 * s.half + j) / P;
      float x1[P], x2[P];
      load_pack<P>(inp, first, x1);
      load_pack<P>(inp, first + packs, x2);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float y1 = x1[k] * c[k] - x2[k] * sn[k];
        x2[k] = x2[k] * c[k] + x1[k] * sn[k];
        x1[k] = y1;
      }
      store_pack<P>(out, first, x1);
      store_pack<P>(out, first + packs, x2);
    }
  }
}

// Picks the pack size and the head groups, then launches; arguments already checked.
template <typename E>
void launch_rope(nfn_ctx* ctx, E* out, const E* inp, int N, const Frequencies& freq, RopeShape shape) {
  constexpr int V = Pack<E>::n;
  const bool packed = shape.half % V == 0 && shape.stride % V == 0 && aligned16({out, inp});
  const size_t items = static_cast<size_t>(N) * (shape.half / (packed ? V : 1));
  const size_t groups = std::min<size_t>(shape.heads, (kTargetItems + items - 1) / items);
  shape.heads_per_group = static_cast<int>((shape.heads + groups - 1) / groups);
  const dim3 grid(nfn::cuda::grid_for(items, kThreads),
                  (shape.heads + shape.heads_per_group - 1) / shape.heads_per_group);
  if (packed)
    nfn::cuda::launch_kernel(ctx, rope_kernel<E, V>, grid, kThreads, 0, out, inp, freq, shape, items);
  else
    nfn::cuda::launch_kernel(ctx, rope_kernel<E, 1>, grid, kThreads, 0, out, inp, freq, shape, items);
}

// rope_forward (direction 1) and rope_backward (direction -1: the inverse rotation).
nfn_status rope(nfn_ctx* ctx, const char* op, const char* pointers, void* out, const void* inp, int N, int T,
                int pos_offset, int stride, int NH, int NKV, int HD, float theta, int sign, nfn_dtype dtype,
                int direction) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, op);
  const std::string why =
      nfn::rope::check_args(op, pointers, out, inp, N, T, pos_offset, stride, NH, NKV, HD, theta, sign);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  if (HD > 2 * kMaxHalf) return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: head dim HD=%d exceeds %d", op, HD, 2 * kMaxHalf);
  Frequencies freq = {};
  for (int j = 0; j < HD / 2; ++j) freq.inv_freq[j] = nfn::rope::inv_freq(theta, j, HD);
  const RopeShape shape = {T, pos_offset, stride, NH + NKV, 0, HD / 2, static_cast<float>(sign * direction)};
  NFN_DISPATCH(dtype, E, launch_rope(ctx, static_cast<E*>(out), static_cast<const E*>(inp), N, freq, shape));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace

NFN_ROPE_ENTRY_POINTS(rope)
