// Row softmax into f32, and the chunked tied LM head with cross-entropy: per chunk of rows,
// logits in the storage dtype come from one GEMM (as llm.c and PyTorch's autocast keep them),
// one kernel turns each row into its loss and, in place, its gradient (f32 math), and two
// GEMMs take that gradient to dx and dwte. Only a chunk of rows of logits exists at a time.
#include <algorithm>

#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::block_max;
using nfn::cuda::block_sum;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::Pack;
using nfn::cuda::to_f32;

namespace {

constexpr int kBlock = 512;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// Logits per chunk, in the storage dtype: 2 GiB, so GPT-2's 16 x 1024 tokens (1.6 GB in bf16)
// are one chunk: three full-size GEMMs, and dwte read and written once.
constexpr size_t kChunkBytes = size_t{1} << 31;

template <typename T>
__global__ void __launch_bounds__(kBlock) softmax_kernel(float* out, const T* inp, int V, int stride) {
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

// f(value as f32, column) for each of a row's first V logits, 16 bytes a load where kVec
// (the caller checked that every row starts 16-byte aligned and the row stride is a whole
// number of 16-byte packs).
template <bool kVec, typename T, typename F>
__device__ __forceinline__ void read_row(const T* row, int V, F&& f) {
  if constexpr (kVec) {
    constexpr int n = Pack<T>::n;
    const auto* packs = reinterpret_cast<const Pack<T>*>(row);
    for (int i = threadIdx.x; i < (V + n - 1) / n; i += blockDim.x) {
      const Pack<T> p = packs[i];
      for (int j = 0; j < n; ++j)
        if (i * n + j < V) f(to_f32(p.v[j]), i * n + j);
    }
  } else {
    for (int c = threadIdx.x; c < V; c += blockDim.x) f(to_f32(row[c]), c);
  }
}

// row[c] = f(row[c] as f32, c) for every column c < width (the row stride: padding too),
// each thread rewriting only what it read.
template <bool kVec, typename T, typename F>
__device__ __forceinline__ void rewrite_row(T* row, int width, F&& f) {
  if constexpr (kVec) {
    auto* packs = reinterpret_cast<Pack<T>*>(row);
    for (int i = threadIdx.x; i < width / Pack<T>::n; i += blockDim.x) {
      Pack<T> p = packs[i];
      for (int j = 0; j < Pack<T>::n; ++j) p.v[j] = from_f32<T>(f(to_f32(p.v[j]), i * Pack<T>::n + j));
      packs[i] = p;
    }
  } else {
    for (int c = threadIdx.x; c < width; c += blockDim.x) row[c] = from_f32<T>(f(to_f32(row[c]), c));
  }
}

// One block per row of the chunk (Vp logits a row, the first V in the softmax): the row's
// loss from its logits (storage dtype, f32 math: one pass keeps a running max and a sum
// rescaled to it), and, when `backward`, the logits overwritten in place by their gradient
// (softmax - onehot) * grad_scale (a second pass), 0 in the padded columns. Masked rows get
// loss 0 and gradient 0.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_kernel(float* row_loss, T* logits, const int32_t* targets, int V, int Vp, float grad_scale,
                         bool backward) {
  __shared__ float shared[32];
  T* x = logits + static_cast<size_t>(blockIdx.x) * Vp;
  const int target = targets[blockIdx.x];
  if (target < 0) {
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 0.f;
    if (backward) rewrite_row<kVec>(x, Vp, [](float, int) { return 0.f; });
    return;
  }
  const float target_logit = threadIdx.x == 0 ? to_f32(x[target]) : 0.f;  // read before any write
  // In base 2 (logits times log2 e), so each exponential is one exp2f, as flash_mma's are.
  float m = -INFINITY, s = 0.f;
  read_row<kVec>(x, V, [&](float v, int) {
    const float u = v * kLog2e;
    if (u > m) {
      s = s * exp2f(m - u) + 1.f;
      m = u;
    } else {
      s += exp2f(u - m);
    }
  });
  const float row_max = block_max(m, shared);
  const float sum = block_sum(m == -INFINITY ? 0.f : s * exp2f(m - row_max), shared);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = row_max * kLn2 + logf(sum) - target_logit;
  if (!backward) return;
  const float scale = grad_scale / sum;
  rewrite_row<kVec>(x, Vp, [&](float v, int c) {
    return c < V ? exp2f(v * kLog2e - row_max) * scale - (c == target ? grad_scale : 0.f) : 0.f;
  });
}

// losses[i] = row_loss[i] and *loss_sum += sum of row_loss, in a fixed order (one block).
__global__ void __launch_bounds__(1024)
    loss_total_kernel(float* losses, float* loss_sum, const float* row_loss, int N) {
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
                                     const int32_t* targets, int N, int C, int V, int Vp,
                                     float grad_scale, nfn_dtype dtype) {
  const char* op = "lm_head_cross_entropy";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (N <= 0 || C <= 0 || V <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d V=%d must be positive", op, N, C, V);
  if (Vp < V) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: Vp=%d (wte's rows) is below V=%d", op, Vp, V);
  if (x == nullptr || wte == nullptr || targets == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null x, wte or targets", op);
  if (dwte != nullptr && dx == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dwte needs dx (the backward runs only with dx)", op);
  const size_t es = nfn::cuda::dtype_size(dtype);
  // Chunk rows: a multiple of 8 keeps every chunk's GEMM operands 16-byte aligned.
  int rows = ctx->lm_head_rows > 0 ? ctx->lm_head_rows
                                   : static_cast<int>(std::max<size_t>(8, kChunkBytes / (es * Vp) / 8 * 8));
  rows = std::min(rows, N);
  const bool backward = dx != nullptr;
  const size_t logits_bytes = align256(es * rows * static_cast<size_t>(Vp));
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, logits_bytes + sizeof(float) * N, &buf, op));
  void* logits = buf;  // the chunk's logits, then (backward) their gradient in place
  auto* row_loss = reinterpret_cast<float*>(static_cast<char*>(buf) + logits_bytes);
  const bool vec = es * Vp % 16 == 0;  // every row starts 16-byte aligned (scratch is 256-aligned)
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int R = std::min(rows, N - r0);
    const char* xr = static_cast<const char*>(x) + es * r0 * C;
    nfn::cuda::GemmArgs g;  // logits (Vp,R col-major) = wte (C,Vp)^T @ x (C,R)
    g.trans_a = true;
    g.m = Vp, g.n = R, g.k = C;
    g.a = wte, g.lda = C;
    g.b = xr, g.ldb = C;
    g.d = logits, g.ldd = Vp;
    g.ab = g.d_dtype = dtype;
    NFN_TRY(nfn::cuda::gemm(ctx, op, g));
    NFN_DISPATCH(dtype, E, {
      auto* l = static_cast<E*>(logits);
      if (vec)
        cross_entropy_kernel<E, true><<<R, kBlock, 0, ctx->stream>>>(row_loss + r0, l, targets + r0, V, Vp,
                                                                     grad_scale, backward);
      else
        cross_entropy_kernel<E, false><<<R, kBlock, 0, ctx->stream>>>(row_loss + r0, l, targets + r0, V, Vp,
                                                                      grad_scale, backward);
    });
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
    if (!backward) continue;
    nfn::cuda::GemmArgs gx;  // dx (C,R col-major) = wte (C,Vp) @ dlogits (Vp,R)
    gx.m = C, gx.n = R, gx.k = Vp;
    gx.a = wte, gx.lda = C;
    gx.b = logits, gx.ldb = Vp;
    gx.d = static_cast<char*>(dx) + es * r0 * C, gx.ldd = C;
    gx.ab = gx.d_dtype = dtype;
    NFN_TRY(nfn::cuda::gemm(ctx, op, gx));
    if (dwte == nullptr) continue;
    nfn::cuda::GemmArgs gw;  // dwte (C,Vp col-major) += x (C,R) @ dlogits^T (R,Vp)
    gw.trans_b = true;
    gw.m = C, gw.n = Vp, gw.k = R;
    gw.a = xr, gw.lda = C;
    gw.b = logits, gw.ldb = Vp;
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
