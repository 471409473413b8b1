// Device-side loads and stores that convert between the storage dtype and f32 math.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>

namespace nfn::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }

// Optional tensors (bias, weight) read as `fallback` when absent.
template <typename T>
__device__ __forceinline__ float load_or(const T* p, size_t i, float fallback) {
  return p != nullptr ? to_f32(p[i]) : fallback;
}

// N elements moved as one load or store: 16 bytes by default.
template <typename T, int N = 16 / sizeof(T)>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int n = N;
  T v[N];
};

// Whether every pointer given (NULL counts as aligned) is 16-byte aligned, so Pack<T> can
// move its data.
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Whether rows of C elements of T, in tensors that start at these pointers, can move as
// Pack<T>: C a whole number of packs and every tensor 16-byte aligned.
template <typename T>
bool rows_packed(int C, std::initializer_list<const void*> tensors) {
  return C % Pack<T>::n == 0 && aligned16(tensors);
}

// Elements i*N .. i*N+N-1 of p as f32 (`fallback` for each when p is NULL), and back.
template <int N, typename T>
__device__ __forceinline__ void load_pack(const T* p, size_t i, float (&out)[N], float fallback = 0.f) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = fallback;
    return;
  }
  const Pack<T, N> v = reinterpret_cast<const Pack<T, N>*>(p)[i];
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = to_f32(v.v[j]);
}

template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, size_t i, const float (&in)[N]) {
  Pack<T, N> v;
#pragma unroll
  for (int j = 0; j < N; ++j) v.v[j] = from_f32<T>(in[j]);
  reinterpret_cast<Pack<T, N>*>(p)[i] = v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread
// gets the result. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : 0.f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace nfn::cuda

// Runs `body` with T bound to float or bf16 according to `dtype` (checked beforehand).
#define NFN_DISPATCH(dtype, T, ...)      \
  do {                                   \
    if ((dtype) == NFN_F32) {            \
      using T = float;                   \
      __VA_ARGS__;                       \
    } else {                             \
      using T = nfn::cuda::bf16;         \
      __VA_ARGS__;                       \
    }                                    \
  } while (0)
