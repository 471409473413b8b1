// LayerNorm and RMSNorm: one warp per row with f32 statistics; the weight and bias
// gradients are deterministic column sums (column_reduce.cuh).
#include "cuda/ops/column_reduce.cuh"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::load_or;
using nfn::cuda::to_f32;
using nfn::cuda::warp_sum;

namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp,
                                         const T* weight, const T* bias, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const T* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.f;
  for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
  const float mean = warp_sum(sum) / C;
  float var = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f32(x[c]) - mean;
    var += d * d;
  }
  const float rstd = rsqrtf(warp_sum(var) / C + kEps);
  T* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32)
    y[c] = from_f32<T>((to_f32(x[c]) - mean) * rstd * to_f32(weight[c]) + load_or(bias, c, 0.f));
  if (lane == 0) {
    if (mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                      const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.f, dnorm_xhat_sum = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = to_f32(dout[off + c]) * to_f32(weight[c]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * (to_f32(inp[off + c]) - m) * r;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C, dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_f32(inp[off + c]) - m) * r;
    const float dnorm = to_f32(dout[off + c]) * to_f32(weight[c]);
    const float d = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * r;
    dinp[off + c] = from_f32<T>(to_f32(dinp[off + c]) + d);
  }
}

// (dweight, dbias) terms of one element: dout * xhat and dout.
template <typename T>
struct LayerNormParamGrads {
  const T *dout, *inp;
  const float *mean, *rstd;
  int C;
  __device__ void operator()(int r, int c, float* v) const {
    const size_t i = static_cast<size_t>(r) * C + c;
    const float g = to_f32(dout[i]);
    v[0] = g * (to_f32(inp[i]) - mean[r]) * rstd[r];
    v[1] = g;
  }
};

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd_out, const T* inp, const T* weight,
                                       int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const T* x = inp + static_cast<size_t>(row) * C;
  float sq = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_f32(x[c]);
    sq += v * v;
  }
  const float rstd = rsqrtf(warp_sum(sq) / C + kEps);
  T* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = from_f32<T>(to_f32(x[c]) * rstd * load_or(weight, c, 1.f));
  if (lane == 0 && rstd_out != nullptr) rstd_out[row] = rstd;
}

template <typename T>
__global__ void rmsnorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                    const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32)
    dot += to_f32(dout[off + c]) * load_or(weight, c, 1.f) * to_f32(inp[off + c]) * r;
  const float dnorm_xhat_mean = warp_sum(dot) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = to_f32(inp[off + c]) * r;
    const float dnorm = to_f32(dout[off + c]) * load_or(weight, c, 1.f);
    dinp[off + c] = from_f32<T>(to_f32(dinp[off + c]) + (dnorm - xhat * dnorm_xhat_mean) * r);
  }
}

template <typename T>
struct RmsNormWeightGrad {
  const T *dout, *inp;
  const float* rstd;
  int C;
  __device__ void operator()(int r, int c, float* v) const {
    const size_t i = static_cast<size_t>(r) * C + c;
    v[0] = to_f32(dout[i]) * to_f32(inp[i]) * rstd[r];
  }
};

nfn_status check_shape(nfn_ctx* ctx, const char* op, int N, int C) {
  if (N <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d must be positive", op, N, C);
  return NFN_OK;
}

const dim3 kRowBlock(32, kRowsPerBlock);
unsigned row_grid(int N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

}  // namespace

extern "C" {

nfn_status nfn_layernorm_forward(nfn_ctx* ctx, void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C,
                                 nfn_dtype dtype) {
  const char* op = "layernorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr || weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, inp or weight", op);
  NFN_DISPATCH(dtype, E, layernorm_forward_kernel<<<row_grid(N), kRowBlock, 0, ctx->stream>>>(
                             static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp),
                             static_cast<const E*>(weight), static_cast<const E*>(bias), N, C));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

nfn_status nfn_layernorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias,
                                  const void* dout, const void* inp, const void* weight,
                                  const float* mean, const float* rstd, int N, int C,
                                  nfn_dtype dtype) {
  const char* op = "layernorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (dout == nullptr || inp == nullptr || weight == nullptr || mean == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout, inp, weight, mean or rstd", op);
  NFN_DISPATCH(dtype, E, {
    if (dinp != nullptr)
      layernorm_dinp_kernel<<<row_grid(N), kRowBlock, 0, ctx->stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(inp),
          static_cast<const E*>(weight), mean, rstd, N, C);
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
    if (dweight != nullptr || dbias != nullptr) {
      E* const dsts[2] = {static_cast<E*>(dweight), static_cast<E*>(dbias)};
      LayerNormParamGrads<E> f{static_cast<const E*>(dout), static_cast<const E*>(inp), mean, rstd, C};
      NFN_TRY(nfn::cuda::add_column_sums(ctx, op, dsts, f, N, C));
    }
  });
  return NFN_OK;
}

nfn_status nfn_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp,
                               const void* weight, int N, int C, nfn_dtype dtype) {
  const char* op = "rmsnorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  NFN_DISPATCH(dtype, E, rmsnorm_forward_kernel<<<row_grid(N), kRowBlock, 0, ctx->stream>>>(
                             static_cast<E*>(out), rstd, static_cast<const E*>(inp),
                             static_cast<const E*>(weight), N, C));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

nfn_status nfn_rmsnorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int N,
                                int C, nfn_dtype dtype) {
  const char* op = "rmsnorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (dout == nullptr || inp == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout, inp or rstd", op);
  if (dweight != nullptr && weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dweight given but weight is NULL", op);
  NFN_DISPATCH(dtype, E, {
    if (dinp != nullptr)
      rmsnorm_dinp_kernel<<<row_grid(N), kRowBlock, 0, ctx->stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(dout), static_cast<const E*>(inp),
          static_cast<const E*>(weight), rstd, N, C);
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
    if (dweight != nullptr) {
      E* const dsts[1] = {static_cast<E*>(dweight)};
      RmsNormWeightGrad<E> f{static_cast<const E*>(dout), static_cast<const E*>(inp), rstd, C};
      NFN_TRY(nfn::cuda::add_column_sums(ctx, op, dsts, f, N, C));
    }
  });
  return NFN_OK;
}

}  // extern "C"
