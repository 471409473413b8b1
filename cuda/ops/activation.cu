// Elementwise ops: GPT-2's tanh GELU and its gradient, and bias + residual.
#include "cuda/ops/activation.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::load_or;
using nfn::cuda::to_f32;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
}

#define GRID_STRIDE(i, n)                                                               \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) out[i] = from_f32<T>(gelu(to_f32(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* pre, const T* dout, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) dinp[i] = from_f32<T>(to_f32(dout[i]) * gelu_grad(to_f32(pre[i])));
}

template <typename T>
__global__ void residual_kernel(T* out, const T* residual, const T* inp, const T* bias, int C,
                                size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    out[i] = from_f32<T>(to_f32(residual[i]) + to_f32(inp[i]) + load_or(bias, i % C, 0.f));
  }
}

}  // namespace

namespace nfn::cuda {

nfn_status launch_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_DISPATCH(dtype, E, nfn::cuda::launch_kernel(ctx, gelu_forward_kernel<E>, grid_for(n, 256), 256, 0,
                                                  static_cast<E*>(out), static_cast<const E*>(inp), n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "gelu_forward");
  return NFN_OK;
}

}  // namespace nfn::cuda

extern "C" {

nfn_status nfn_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "gelu_forward");
  if (n == 0) return NFN_OK;
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "gelu_forward: null out or inp");
  return nfn::cuda::launch_gelu_forward(ctx, out, inp, n, dtype);
}

nfn_status nfn_gelu_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n,
                             nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "gelu_backward");
  if (n == 0) return NFN_OK;
  if (dinp == nullptr || pre == nullptr || dout == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "gelu_backward: null dinp, pre or dout");
  NFN_DISPATCH(dtype, E,
               nfn::cuda::launch_kernel(ctx, gelu_backward_kernel<E>, nfn::cuda::grid_for(n, 256), 256, 0,
                                        static_cast<E*>(dinp), static_cast<const E*>(pre),
                                        static_cast<const E*>(dout), n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "gelu_backward");
  return NFN_OK;
}

nfn_status nfn_residual_forward(nfn_ctx* ctx, void* out, const void* residual, const void* inp,
                                const void* bias, int N, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "residual_forward");
  if (N <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "residual_forward: N=%d C=%d must be positive", N, C);
  if (out == nullptr || residual == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "residual_forward: null out, residual or inp");
  const size_t n = static_cast<size_t>(N) * C;
  NFN_DISPATCH(dtype, E,
               nfn::cuda::launch_kernel(ctx, residual_kernel<E>, nfn::cuda::grid_for(n, 256), 256, 0,
                                        static_cast<E*>(out), static_cast<const E*>(residual),
                                        static_cast<const E*>(inp), static_cast<const E*>(bias), C, n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "residual_forward");
  return NFN_OK;
}

}  // extern "C"
