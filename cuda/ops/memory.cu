// Memory ops on the GPU: stream-ordered allocation, fills, copies, dtype conversion,
// dequantization and token widening.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"
#include "cc/util/quant.h"

using nfn::cuda::fail;

namespace {

template <typename T>
__global__ void fill_kernel(T* dst, T value, size_t n) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, size_t n) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = nfn::cuda::from_f32<Dst>(nfn::cuda::to_f32(src[i]));
}

// One thread a value: quant.h's block_value, the CPU library's formula.
template <typename T>
__global__ void dequantize_kernel(T* out, const uint8_t* in, int qtype, size_t n) {
  nfn::cuda::pdl_begin();
  const size_t bytes = nfn::quant::block_bytes(qtype);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = nfn::cuda::from_f32<T>(nfn::quant::block_value(qtype, in + i / nfn::quant::kBlock * bytes,
                                                            static_cast<int>(i % nfn::quant::kBlock)));
}

__global__ void widen_kernel(int32_t* dst, const uint16_t* src, size_t n) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<int32_t>(src[i]);
}

cudaMemcpyKind to_cuda(nfn_copy_kind kind) {
  switch (kind) {
    case NFN_HOST_TO_DEVICE: return cudaMemcpyHostToDevice;
    case NFN_DEVICE_TO_HOST: return cudaMemcpyDeviceToHost;
    default: return cudaMemcpyDeviceToDevice;
  }
}

}  // namespace

extern "C" {

nfn_status nfn_alloc(nfn_ctx* ctx, size_t bytes, void** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "alloc: null output pointer");
  NFN_TRY(nfn::cuda::not_recording(ctx, "alloc"));
  NFN_CUDA_TRY(ctx, cudaMallocAsync(out, bytes == 0 ? 1 : bytes, ctx->stream), "alloc");
  return NFN_OK;
}

nfn_status nfn_free(nfn_ctx* ctx, void* ptr) {
  NFN_CHECK_CTX(ctx);
  if (ptr == nullptr) return NFN_OK;
  NFN_TRY(nfn::cuda::not_recording(ctx, "free"));
  NFN_CUDA_TRY(ctx, cudaFreeAsync(ptr, ctx->stream), "free");
  return NFN_OK;
}

nfn_status nfn_alloc_host(nfn_ctx* ctx, size_t bytes, void** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "alloc_host: null output pointer");
  NFN_TRY(nfn::cuda::not_recording(ctx, "alloc_host"));
  NFN_CUDA_TRY(ctx, cudaMallocHost(out, bytes == 0 ? 1 : bytes), "alloc_host");
  return NFN_OK;
}

nfn_status nfn_free_host(nfn_ctx* ctx, void* ptr) {
  NFN_CHECK_CTX(ctx);
  if (ptr == nullptr) return NFN_OK;
  NFN_TRY(nfn::cuda::not_recording(ctx, "free_host"));
  NFN_CUDA_TRY(ctx, cudaFreeHost(ptr), "free_host");  // waits for the device, as a host free must
  return NFN_OK;
}

nfn_status nfn_fill(nfn_ctx* ctx, void* dst, nfn_dtype dtype, float value, size_t n) {
  NFN_CHECK_CTX(ctx);
  if (n == 0) return NFN_OK;
  if (dst == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "fill: null dst");
  // +0 is all zero bits in f32 and bf16: the driver's memset writes it at full bandwidth (the
  // trainer zeroes its gradients every step; fill_kernel's 2-byte stores take 163 us for
  // GPT-2 124M's 249 MB of bf16 gradients on an H200, 1.5 TB/s).
  if (value == 0.f && !std::signbit(value) && (dtype == NFN_F32 || dtype == NFN_BF16)) {
    NFN_CUDA_TRY(ctx, cudaMemsetAsync(dst, 0, n * nfn::cuda::dtype_size(dtype), ctx->stream), "fill");
    return NFN_OK;
  }
  const unsigned block = 256, grid = nfn::cuda::grid_for(n, block);
  if (dtype == NFN_F32) {
    nfn::cuda::launch_kernel(ctx, fill_kernel<float>, grid, block, 0, static_cast<float*>(dst), value, n);
  } else if (dtype == NFN_BF16) {
    nfn::cuda::launch_kernel(ctx, fill_kernel<__nv_bfloat16>, grid, block, 0, static_cast<__nv_bfloat16*>(dst),
                             __float2bfloat16_rn(value), n);
  } else {
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "fill: unknown dtype %d", static_cast<int>(dtype));
  }
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "fill");
  return NFN_OK;
}

nfn_status nfn_copy(nfn_ctx* ctx, void* dst, const void* src, size_t bytes, nfn_copy_kind kind) {
  NFN_CHECK_CTX(ctx);
  if (bytes == 0) return NFN_OK;
  if (dst == nullptr || src == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "copy: null pointer");
  if (kind != NFN_DEVICE_TO_DEVICE) NFN_TRY(nfn::cuda::not_recording(ctx, "copy to or from host memory"));
  NFN_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), ctx->stream), "copy");
  return NFN_OK;
}

nfn_status nfn_convert(nfn_ctx* ctx, void* dst, nfn_dtype dst_dtype, const void* src,
                       nfn_dtype src_dtype, size_t n) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dst_dtype, "convert");
  NFN_CHECK_DTYPE(ctx, src_dtype, "convert");
  if (n == 0) return NFN_OK;
  if (dst == nullptr || src == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "convert: null pointer");
  const unsigned block = 256, grid = nfn::cuda::grid_for(n, block);
  NFN_DISPATCH(dst_dtype, D, NFN_DISPATCH(src_dtype, S,
      nfn::cuda::launch_kernel(ctx, convert_kernel<D, S>, grid, block, 0, static_cast<D*>(dst),
                               static_cast<const S*>(src), n)));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "convert");
  return NFN_OK;
}

nfn_status nfn_dequantize(nfn_ctx* ctx, void* out, const void* in, nfn_qtype qtype, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "dequantize");
  if (!nfn::quant::valid_type(qtype))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "dequantize: unknown qtype %d", static_cast<int>(qtype));
  if (n % nfn::quant::kBlock != 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "dequantize: n=%zu is not a multiple of the block of %d", n,
                nfn::quant::kBlock);
  if (n == 0) return NFN_OK;
  if (out == nullptr || in == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "dequantize: null pointer");
  const unsigned block = 256, grid = nfn::cuda::grid_for(n, block);
  NFN_DISPATCH(dtype, T,
               nfn::cuda::launch_kernel(ctx, dequantize_kernel<T>, grid, block, 0, static_cast<T*>(out),
                                        static_cast<const uint8_t*>(in), static_cast<int>(qtype), n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "dequantize");
  return NFN_OK;
}

nfn_status nfn_widen_tokens(nfn_ctx* ctx, int32_t* dst, const uint16_t* src, size_t n) {
  NFN_CHECK_CTX(ctx);
  if (n == 0) return NFN_OK;
  if (dst == nullptr || src == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "widen_tokens: null pointer");
  const unsigned block = 256, grid = nfn::cuda::grid_for(n, block);
  nfn::cuda::launch_kernel(ctx, widen_kernel, grid, block, 0, dst, src, n);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "widen_tokens");
  return NFN_OK;
}

}  // extern "C"
