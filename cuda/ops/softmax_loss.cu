// Row softmax into f32, and the chunked tied LM head with cross-entropy: per chunk of rows,
// logits (f32) come from one GEMM, one kernel turns each row into its loss and, in place,
// its gradient, and two GEMMs take that gradient to dx and dwte. Only a chunk of rows of
// logits exists at a time.
#include <algorithm>

#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::block_max;
using nfn::cuda::block_sum;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

constexpr int kBlock = 512;
constexpr size_t kChunkElements = size_t{1} << 25;  // logits per chunk (128 MiB of f32)

template <typename T>
__global__ void softmax_kernel(float* out, const T* inp, int V, int stride) {
  __shared__ float shared[32];
  const T* x = inp + static_cast<size_t>(blockIdx.x) * stride;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, to_f32(x[c]));
  m = block_max(m, shared);
  float sum = 0.f;
  for (int c = threadIdx.x; c < V; c += blockDim.x) sum += expf(to_f32(x[c]) - m);
  const float inv = 1.f / block_sum(sum, shared);
  float* y = out + static_cast<size_t>(blockIdx.x) * V;
  for (int c = threadIdx.x; c < V; c += blockDim.x) y[c] = expf(to_f32(x[c]) - m) * inv;
}

// One block per row of the chunk: the row's loss, and (when dlogits is set) its gradient
// (softmax - onehot) * grad_scale in the storage dtype; masked rows get loss 0, gradient 0.
template <typename T>
__global__ void cross_entropy_kernel(float* row_loss, T* dlogits, const float* logits,
                                     const int32_t* targets, int V, float grad_scale) {
  __shared__ float shared[32];
  const size_t off = static_cast<size_t>(blockIdx.x) * V;
  const float* x = logits + off;
  const int target = targets[blockIdx.x];
  if (target < 0) {
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 0.f;
    if (dlogits != nullptr)
      for (int c = threadIdx.x; c < V; c += blockDim.x) dlogits[off + c] = from_f32<T>(0.f);
    return;
  }
  float m = -INFINITY;
  for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, x[c]);
  m = block_max(m, shared);
  float sum = 0.f;
  for (int c = threadIdx.x; c < V; c += blockDim.x) sum += expf(x[c] - m);
  sum = block_sum(sum, shared);
  const float log_sum = logf(sum);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = log_sum + m - x[target];
  if (dlogits == nullptr) return;
  const float inv = 1.f / sum;
  for (int c = threadIdx.x; c < V; c += blockDim.x) {
    const float p = expf(x[c] - m) * inv;
    dlogits[off + c] = from_f32<T>((p - (c == target ? 1.f : 0.f)) * grad_scale);
  }
}

// losses[i] = row_loss[i] and *loss_sum += sum of row_loss, in a fixed order (one block).
__global__ void loss_total_kernel(float* losses, float* loss_sum, const float* row_loss, int N) {
  __shared__ float shared[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    s += row_loss[i];
    if (losses != nullptr) losses[i] = row_loss[i];
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0 && loss_sum != nullptr) *loss_sum += s;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

extern "C" {

nfn_status nfn_softmax_forward(nfn_ctx* ctx, float* out, const void* inp, int N, int V, int stride,
                               nfn_dtype dtype) {
  NFN_CHECK_DTYPE(ctx, dtype, "softmax_forward");
  if (N <= 0 || V <= 0 || stride < V)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                "softmax_forward: N=%d V=%d stride=%d (need N, V > 0 and stride >= V)", N, V, stride);
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "softmax_forward: null out or inp");
  NFN_DISPATCH(dtype, E, softmax_kernel<<<N, kBlock, 0, ctx->stream>>>(
                             out, static_cast<const E*>(inp), V, stride));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "softmax_forward");
  return NFN_OK;
}

nfn_status nfn_lm_head_cross_entropy(nfn_ctx* ctx, float* losses, float* loss_sum, void* dx,
                                     void* dwte, const void* x, const void* wte,
                                     const int32_t* targets, int N, int C, int V, float grad_scale,
                                     nfn_dtype dtype) {
  const char* op = "lm_head_cross_entropy";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (N <= 0 || C <= 0 || V <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d V=%d must be positive", op, N, C, V);
  if (x == nullptr || wte == nullptr || targets == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null x, wte or targets", op);
  if (dwte != nullptr && dx == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dwte needs dx (the backward runs only with dx)", op);
  const size_t es = nfn::cuda::dtype_size(dtype);
  // Chunk rows: a multiple of 8 keeps every chunk's GEMM operands 16-byte aligned.
  int rows = ctx->lm_head_rows > 0 ? ctx->lm_head_rows
                                   : static_cast<int>(std::max<size_t>(8, kChunkElements / V / 8 * 8));
  rows = std::min(rows, N);
  const bool backward = dx != nullptr;
  const size_t logits_bytes = align256(sizeof(float) * rows * static_cast<size_t>(V));
  const size_t dlogits_bytes = backward ? align256(es * rows * static_cast<size_t>(V)) : 0;
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, logits_bytes + dlogits_bytes + sizeof(float) * N, &buf, op));
  auto* logits = static_cast<float*>(buf);
  void* dlogits = backward ? static_cast<char*>(buf) + logits_bytes : nullptr;
  auto* row_loss = reinterpret_cast<float*>(static_cast<char*>(buf) + logits_bytes + dlogits_bytes);
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int R = std::min(rows, N - r0);
    const char* xr = static_cast<const char*>(x) + es * r0 * C;
    nfn::cuda::GemmArgs g;  // logits (V,R col-major) = wte (C,V)^T @ x (C,R), in f32
    g.trans_a = true;
    g.m = V, g.n = R, g.k = C;
    g.a = wte, g.lda = C;
    g.b = xr, g.ldb = C;
    g.d = logits, g.ldd = V;
    g.ab = dtype, g.d_dtype = NFN_F32;
    NFN_TRY(nfn::cuda::gemm(ctx, op, g));
    NFN_DISPATCH(dtype, E, cross_entropy_kernel<<<R, kBlock, 0, ctx->stream>>>(
                               row_loss + r0, static_cast<E*>(dlogits), logits, targets + r0, V,
                               grad_scale));
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
    if (!backward) continue;
    nfn::cuda::GemmArgs gx;  // dx (C,R col-major) = wte (C,V) @ dlogits (V,R)
    gx.m = C, gx.n = R, gx.k = V;
    gx.a = wte, gx.lda = C;
    gx.b = dlogits, gx.ldb = V;
    gx.d = static_cast<char*>(dx) + es * r0 * C, gx.ldd = C;
    gx.ab = gx.d_dtype = dtype;
    NFN_TRY(nfn::cuda::gemm(ctx, op, gx));
    if (dwte == nullptr) continue;
    nfn::cuda::GemmArgs gw;  // dwte (C,V col-major) += x (C,R) @ dlogits^T (R,V)
    gw.trans_b = true;
    gw.m = C, gw.n = V, gw.k = R;
    gw.a = xr, gw.lda = C;
    gw.b = dlogits, gw.ldb = V;
    gw.d = dwte, gw.ldd = C;
    gw.ab = gw.d_dtype = dtype;
    gw.beta = 1.f;
    NFN_TRY(nfn::cuda::gemm(ctx, op, gw));
  }
  if (losses != nullptr || loss_sum != nullptr) {
    loss_total_kernel<<<1, 1024, 0, ctx->stream>>>(losses, loss_sum, row_loss, N);
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  }
  return NFN_OK;
}

}  // extern "C"
