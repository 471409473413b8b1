// Row softmax into f32, and the chunked tied LM head with cross-entropy: per chunk of rows,
// logits in the storage dtype come from one GEMM (as llm.c and PyTorch's autocast keep them),
// one kernel turns each row into its loss and, in place, its gradient (f32 math), and two
// GEMMs take that gradient to dx and dwte. Only a chunk of rows of logits exists at a time.
// A soft cap is applied by that kernel as it reads each logit, in both of its passes. Per-row
// weights are applied around it, not in it (its registers are full): dx's rows are scaled after
// their GEMM, dwte's GEMM reads x's rows scaled, and the loss total weighs each row's loss.
#include <algorithm>
#include <cmath>

#include "cuda/ops/context.h"
#include "cuda/ops/cp_async.cuh"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"
#include "cuda/ops/lm_head_chunks.h"

using nfn::cuda::block_max;
using nfn::cuda::block_sum;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::Pack;
using nfn::cuda::to_f32;

namespace {

constexpr int kBlock = 512;
// The cross-entropy kernel's block: a row's 100 KB (GPT-2, bf16) are read twice, so the rows
// resident at once should fit in L2 between the reads. 1,024 threads a row and 2 blocks an SM
// (32 registers a thread at most) keep 264 rows (27 MB) resident on an H200's 132 SMs; 512
// threads would keep 528 (53 MB, near all of its 60 MB of L2, which also takes the gradient
// being written). llm.c's classifier uses 1,024 too. sm_120 runs 1,536 threads an SM: 1 block.
constexpr int kRowBlock = 1024;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kRowBlocksPerSm = 1;
#else
constexpr int kRowBlocksPerSm = 2;
#endif
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// The logits as the softmax sees them, value(z), and the slope their gradient is multiplied
// by, slope(z), from each raw logit z: as they are, or soft-capped (softcap > 0).
struct Uncapped {
  __device__ __forceinline__ float value(float z) const { return z; }
  __device__ __forceinline__ float slope(float) const { return 1.f; }
};

// softcap_forward's cap * tanh(z / cap) and softcap_backward's slope 4e / (1 + e)^2, e =
// e^{-2|z / cap|} (accurate where tanh saturates), with z / cap as z * inv and the quotient
// as a reciprocal: with IEEE divisions the streaming kernels spill at their 32 registers.
struct Capped {
  float cap, inv;  // inv = 1 / cap
  __device__ __forceinline__ float value(float z) const { return cap * tanhf(z * inv); }
  __device__ __forceinline__ float slope(float z) const {
    const float e = expf(-2.f * fabsf(z * inv));
    return 4.f * e * __frcp_rn((1.f + e) * (1.f + e));
  }
};

template <typename T>
__global__ void __launch_bounds__(kBlock) softmax_kernel(float* out, const T* inp, int V, int stride) {
  nfn::cuda::pdl_begin();
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

// Packs of N a thread loads before it uses any, so that more loads are in flight at once (4
// spill at the 32 registers that 2 blocks an SM allow).
constexpr int kLoads = 2;

template <typename P>
__device__ __forceinline__ void store_streaming(P* dst, const P& v) {
  if constexpr (sizeof(P) == 16)
    __stcs(reinterpret_cast<uint4*>(dst), *reinterpret_cast<const uint4*>(&v));
  else
    *dst = v;
}

// Over a row's first V logits u = logit.value(z) * log2 e, the running max m and the sum s of
// 2^(u - m) of this thread's packs of N (N = 16 bytes when the caller found every row 16-byte aligned
// and its stride a whole number of packs; else 1). The block sweeps the row from its end to
// its start, as llm.c's classifier does: the gradient pass then starts on what this pass read
// last, the part of the row likeliest still to be in L2.
template <int N, typename T, typename L>
__device__ __forceinline__ void row_exp2_sums(const T* row, int V, L logit, float& m, float& s) {
  using P = Pack<T, N>;
  const auto* packs = reinterpret_cast<const P*>(row);
  const int units = (V + N - 1) / N, t = threadIdx.x, step = blockDim.x;
  if (t >= units) return;
  for (int i = t + (units - 1 - t) / step * step; i >= 0; i -= kLoads * step) {
    P p[kLoads];
#pragma unroll
    for (int b = 0; b < kLoads; ++b)
      if (i - b * step >= 0) p[b] = packs[i - b * step];
#pragma unroll
    for (int b = 0; b < kLoads; ++b) {
      const int c0 = (i - b * step) * N;
      if (c0 < 0) break;
      float u[N], pm = -INFINITY;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        u[j] = c0 + j < V ? logit.value(to_f32(p[b].v[j])) * kLog2e : -INFINITY;
        pm = fmaxf(pm, u[j]);
      }
      if (pm > m) {  // one rescale a pack, not one an element
        s *= exp2f(m - pm);
        m = pm;
      }
      if (m == -INFINITY) continue;  // only -inf so far: nothing to add (and -inf - -inf is NaN)
#pragma unroll
      for (int j = 0; j < N; ++j) s += exp2f(u[j] - m);
    }
  }
}

// dst[c] = f(src[c] as f32, c) for every column c < width (the row stride: padding too), in
// packs of N as row_exp2_sums reads them; src is dst (in place) or the row's copy in shared
// memory. Its stores are streaming (evict first): the gradient is next read by the dx GEMM
// after every row is done, so L2 is better spent on the logits other blocks have yet to read.
template <int N, typename T, typename F>
__device__ __forceinline__ void rewrite_row(T* dst, const T* src, int width, F&& f) {
  using P = Pack<T, N>;
  auto* out = reinterpret_cast<P*>(dst);
  const auto* in = reinterpret_cast<const P*>(src);
  const int units = width / N, step = blockDim.x;
  for (int i = threadIdx.x; i < units; i += kLoads * step) {
    P p[kLoads];
#pragma unroll
    for (int b = 0; b < kLoads; ++b)
      if (i + b * step < units) p[b] = in[i + b * step];
#pragma unroll
    for (int b = 0; b < kLoads; ++b) {
      const int k = i + b * step;
      if (k >= units) break;
#pragma unroll
      for (int j = 0; j < N; ++j) p[b].v[j] = from_f32<T>(f(to_f32(p[b].v[j]), k * N + j));
      store_streaming(out + k, p[b]);
    }
  }
}

// A row's loss and, when `backward`, its gradient written to dst, from the row's logits at
// src (dst itself, or its copy in shared memory): the body of both cross-entropy kernels.
template <int N, typename T, typename L>
__device__ __forceinline__ void row_loss_and_gradient(float* shared, float* loss, T* dst, const T* src, int target,
                                                      int V, int Vp, float grad_scale, bool backward, L logit) {
  const float target_logit = threadIdx.x == 0 ? logit.value(to_f32(src[target])) : 0.f;  // read before any write
  // In base 2 (logits times log2 e), so each exponential is one exp2f, as flash_mma's are.
  float m = -INFINITY, s = 0.f;
  row_exp2_sums<N>(src, V, logit, m, s);
  const float row_max = block_max(m, shared);
  const float sum = block_sum(m == -INFINITY ? 0.f : s * exp2f(m - row_max), shared);
  if (threadIdx.x == 0) *loss = row_max * kLn2 + logf(sum) - target_logit;
  if (!backward) return;
  const float scale = grad_scale / sum;
  rewrite_row<N>(dst, src, Vp, [&](float v, int c) {
    return c < V ? (exp2f(logit.value(v) * kLog2e - row_max) * scale - (c == target ? grad_scale : 0.f)) *
                       logit.slope(v)
                 : 0.f;
  });
}

// A masked row (target < 0): loss 0 and, when `backward`, gradient 0; true if it was one. A
// target past the vocabulary (the CPU library refuses it; here the targets are not read on
// the host) is no row to score either: its loss is NaN, so that it shows, its gradient 0.
template <int N, typename T>
__device__ __forceinline__ bool masked_row(float* loss, T* x, int target, int V, int Vp, bool backward) {
  if (target >= 0 && target < V) return false;
  if (threadIdx.x == 0) *loss = target < 0 ? 0.f : NAN;
  if (backward) rewrite_row<N>(x, x, Vp, [](float, int) { return 0.f; });
  return true;
}

// One block per row of the chunk, last row first (the GEMM wrote those last, so they are the
// likeliest still in L2), Vp logits a row, the first V in the softmax: the row's loss from its
// logits (storage dtype, f32 math: one pass keeps a running max and a sum rescaled to it),
// and, when `backward`, the logits overwritten in place by their gradient
// (softmax - onehot) * grad_scale * slope (a second pass), 0 in the padded columns. Masked
// rows get loss 0 and gradient 0. L: the logits as they are (Uncapped) or soft-capped.
template <typename T, int N, typename L>
__global__ void __launch_bounds__(kRowBlock, kRowBlocksPerSm)
    cross_entropy_kernel(float* row_loss, T* logits, const int32_t* targets, int V, int Vp, float grad_scale,
                         bool backward, L logit) {
  nfn::cuda::pdl_begin();
  __shared__ float shared[32];
  const int r = gridDim.x - 1 - blockIdx.x;
  T* x = logits + static_cast<size_t>(r) * Vp;
  const int target = targets[r];
  if (masked_row<N>(row_loss + r, x, target, V, Vp, backward)) return;
  row_loss_and_gradient<N>(shared, row_loss + r, x, x, target, V, Vp, grad_scale, backward, logit);
}

// The same where a row's logits fit in shared memory twice over an SM (bf16 GPT-2: 100.6 KB
// a row, 2 rows on an H200): the row is copied there once with cp.async (every 16 bytes of
// it in flight at once, no registers held), and both passes read the copy, so the logits
// cross HBM once each way instead of leaning on L2 for the second read. One block per row,
// last row first; rows 16-byte aligned, a whole number of packs.
constexpr int kStagedBlock = 512;

template <typename T, typename L>
__global__ void __launch_bounds__(kStagedBlock, 2)
    cross_entropy_staged_kernel(float* row_loss, T* logits, const int32_t* targets, int V, int Vp,
                                float grad_scale, bool backward, L logit) {
  nfn::cuda::pdl_begin();
  constexpr int N = Pack<T>::n;
  extern __shared__ uint4 staged[];  // 16-byte units
  __shared__ float shared[32];
  auto* row = reinterpret_cast<T*>(staged);
  const int r = gridDim.x - 1 - blockIdx.x;
  T* x = logits + static_cast<size_t>(r) * Vp;
  const int target = targets[r];
  if (masked_row<N>(row_loss + r, x, target, V, Vp, backward)) return;
  for (int i = threadIdx.x; i < Vp / N; i += blockDim.x) nfn::cuda::cp_async_16(row + i * N, x + i * N, true);
  nfn::cuda::cp_async_commit();
  nfn::cuda::cp_async_wait<0>();
  __syncthreads();
  row_loss_and_gradient<N>(shared, row_loss + r, x, row, target, V, Vp, grad_scale, backward, logit);
}

// Whether rows of Vp logits of T (16-byte aligned: vec) go to cross_entropy_staged_kernel:
// two rows' copies must fit an SM's shared memory (half the opt-in limit a block, so that 2
// blocks run on an SM). Where they do not (larger vocabularies, sm_120's 99 KiB), the
// streaming kernel.
nfn_status staged_rows(nfn_ctx* ctx, const char* op, bool vec, size_t row_bytes, bool* staged) {
  int optin = 0;
  NFN_CUDA_TRY(ctx, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device), op);
  *staged = vec && row_bytes + 1024 <= static_cast<size_t>(optin) / 2;  // 1 KiB: the block's own shared
  return NFN_OK;
}

// losses[i] = row_loss[i] and *loss_sum += sum of row_loss (each times its weight, where
// weights is not NULL), in a fixed order (one block).
__global__ void __launch_bounds__(1024)
    loss_total_kernel(float* losses, float* loss_sum, const float* row_loss, const float* weights, int N) {
  nfn::cuda::pdl_begin();
  __shared__ float shared[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    s += weights != nullptr ? weights[i] * row_loss[i] : row_loss[i];
    if (losses != nullptr) losses[i] = row_loss[i];
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0 && loss_sum != nullptr) *loss_sum += s;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// out (R,C) = each row of x times its weight (f32 math), in place where out is x.
template <typename T>
__global__ void __launch_bounds__(kBlock) scale_rows_kernel(T* out, const T* x, const float* weights, int C) {
  nfn::cuda::pdl_begin();
  const size_t row = blockIdx.x;
  const float w = weights[row];
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[row * C + c] = from_f32<T>(to_f32(x[row * C + c]) * w);
}

nfn_status scale_rows(nfn_ctx* ctx, const char* op, void* out, const void* x, const float* weights, int R, int C,
                      nfn_dtype dtype) {
  NFN_DISPATCH(dtype, E, nfn::cuda::launch_kernel(ctx, scale_rows_kernel<E>, R, kBlock, 0, static_cast<E*>(out),
                                                  static_cast<const E*>(x), weights, C));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

// A chunk of R rows of Vp logits for the cross-entropy kernels.
template <typename E>
struct ChunkRows {
  E* logits;
  float* row_loss;
  const int32_t* targets;
  int R, V, Vp;
  float grad_scale;
  bool backward;
};

// The chunk's cross-entropy kernel: rows staged in shared memory, streamed 16 bytes a load
// (vec), or an element a load; the logits read as `logit` says.
template <typename E, typename L>
nfn_status launch_rows(nfn_ctx* ctx, const char* op, const ChunkRows<E>& c, bool staged, bool vec,
                       size_t row_bytes, L logit) {
  if (staged) {
    // Always: without it the row and the kernel's own 128 bytes must fit 48 KiB together.
    NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(cross_entropy_staged_kernel<E, L>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(row_bytes)),
                 op);
    nfn::cuda::launch_kernel(ctx, cross_entropy_staged_kernel<E, L>, c.R, kStagedBlock, row_bytes, c.row_loss,
                             c.logits, c.targets, c.V, c.Vp, c.grad_scale, c.backward, logit);
  } else if (vec) {
    nfn::cuda::launch_kernel(ctx, cross_entropy_kernel<E, Pack<E>::n, L>, c.R, kRowBlock, 0, c.row_loss, c.logits,
                             c.targets, c.V, c.Vp, c.grad_scale, c.backward, logit);
  } else {
    nfn::cuda::launch_kernel(ctx, cross_entropy_kernel<E, 1, L>, c.R, kRowBlock, 0, c.row_loss, c.logits, c.targets,
                             c.V, c.Vp, c.grad_scale, c.backward, logit);
  }
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_softmax_forward(nfn_ctx* ctx, float* out, const void* inp, int N, int V, int stride,
                               nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "softmax_forward");
  if (N <= 0 || V <= 0 || stride < V)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                "softmax_forward: N=%d V=%d stride=%d (need N, V > 0 and stride >= V)", N, V, stride);
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "softmax_forward: null out or inp");
  NFN_DISPATCH(dtype, E, nfn::cuda::launch_kernel(ctx, softmax_kernel<E>, N, kBlock, 0, out,
                                                  static_cast<const E*>(inp), V, stride));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "softmax_forward");
  return NFN_OK;
}

nfn_status nfn_lm_head_cross_entropy(nfn_ctx* ctx, float* losses, float* loss_sum, void* dx,
                                     void* dwte, const void* x, const void* wte,
                                     const int32_t* targets, const float* weights, int N, int C, int V, int Vp,
                                     float grad_scale, float softcap, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "lm_head_cross_entropy";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (N <= 0 || C <= 0 || V <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d V=%d must be positive", op, N, C, V);
  if (Vp < V) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: Vp=%d (wte's rows) is below V=%d", op, Vp, V);
  if (x == nullptr || wte == nullptr || targets == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null x, wte or targets", op);
  if (dwte != nullptr && dx == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dwte needs dx (the backward runs only with dx)", op);
  if (!(softcap >= 0.f) || std::isinf(softcap))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: softcap=%g must be 0 (no cap) or positive and finite", op,
                static_cast<double>(softcap));
  const size_t es = nfn::cuda::dtype_size(dtype);
  // Chunk rows: a multiple of 8 keeps every chunk's GEMM operands 16-byte aligned.
  int rows = ctx->lm_head_rows > 0 ? ctx->lm_head_rows
                                   : nfn::cuda::auto_chunk_rows(N, es * static_cast<size_t>(Vp));
  rows = std::min(rows, N);
  const bool backward = dx != nullptr;
  const size_t logits_bytes = align256(es * rows * static_cast<size_t>(Vp));
  void* buf = nullptr;
  // With weights and dwte: the chunk's rows of x, each times its weight, for dwte's GEMM.
  const size_t xw_bytes = weights != nullptr && dwte != nullptr ? align256(es * rows * static_cast<size_t>(C)) : 0;
  NFN_TRY(nfn::cuda::scratch(ctx, logits_bytes + xw_bytes + sizeof(float) * N, &buf, op));
  void* logits = buf;  // the chunk's logits, then (backward) their gradient in place
  void* xw = static_cast<char*>(buf) + logits_bytes;
  auto* row_loss = reinterpret_cast<float*>(static_cast<char*>(buf) + logits_bytes + xw_bytes);
  const bool vec = es * Vp % 16 == 0;  // every row starts 16-byte aligned (scratch is 256-aligned)
  const size_t row_bytes = es * static_cast<size_t>(Vp);
  bool staged = false;
  NFN_TRY(staged_rows(ctx, op, vec, row_bytes, &staged));
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int R = std::min(rows, N - r0);
    const char* xr = static_cast<const char*>(x) + es * r0 * C;
    // logits (R,Vp) = x wte^T, dx = dlogits wte, dwte += x^T dlogits: a linear layer's products.
    NFN_TRY(nfn::cuda::gemm(ctx, op, nfn::cuda::linear_output(logits, xr, wte, R, C, Vp, dtype)));
    nfn_status s = NFN_OK;
    NFN_DISPATCH(dtype, E, {
      const ChunkRows<E> chunk{static_cast<E*>(logits), row_loss + r0, targets + r0, R, V, Vp, grad_scale, backward};
      s = softcap > 0.f ? launch_rows(ctx, op, chunk, staged, vec, row_bytes, Capped{softcap, 1.f / softcap})
                        : launch_rows(ctx, op, chunk, staged, vec, row_bytes, Uncapped{});
    });
    NFN_TRY(s);
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
    if (!backward) continue;
    void* dxr = static_cast<char*>(dx) + es * r0 * C;
    NFN_TRY(nfn::cuda::gemm(ctx, op, nfn::cuda::linear_input_grad(dxr, logits, wte, R, C, Vp, dtype)));
    if (weights != nullptr) NFN_TRY(scale_rows(ctx, op, dxr, dxr, weights + r0, R, C, dtype));
    if (dwte == nullptr) continue;
    const void* xs = xr;
    if (weights != nullptr) {
      NFN_TRY(scale_rows(ctx, op, xw, xr, weights + r0, R, C, dtype));
      xs = xw;
    }
    NFN_TRY(nfn::cuda::gemm(ctx, op, nfn::cuda::linear_weight_grad(dwte, xs, logits, R, C, Vp, dtype)));
  }
  if (losses != nullptr || loss_sum != nullptr) {
    nfn::cuda::launch_kernel(ctx, loss_total_kernel, 1, 1024, 0, losses, loss_sum, row_loss, weights, N);
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  }
  return NFN_OK;
}

}  // extern "C"
