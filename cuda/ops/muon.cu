// Muon over many matrix groups: per group a momentum kernel, the update's Frobenius norm (one
// block, fixed order), then Polar Express steps of three cuBLASLt GEMMs each in the context's
// scratch, then the shape-scaled, weight-decayed step (nfn_ops.def has the math). No host
// synchronization or allocation once the scratch has grown, so a graph can record it.
#include <algorithm>
#include <cmath>
#include <string>
#include <cstdint>

#include "cc/ops/muon_args.h"
#include "cc/util/polar_express.h"
#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

constexpr unsigned kBlock = 256;
constexpr unsigned kNormBlock = 1024;

// m = lerp(m, g, 1 - beta); x = nesterov ? lerp(g, m, beta) : m, stored in T.
template <typename T>
__global__ void momentum_kernel(const T* grad, float* m, T* x, size_t n, float beta, int nesterov) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float mi = m[i] + (1.f - beta) * (g - m[i]);
    m[i] = mi;
    x[i] = from_f32<T>(nesterov ? g + beta * (mi - g) : mi);
  }
}

// *out = sum(x^2), one block: each thread's strided share, then the block's tree in a fixed
// order, so the sum has the same bits every run.
template <typename T>
__global__ void sum_squares_kernel(const T* x, size_t n, float* out) {
  nfn::cuda::pdl_begin();
  __shared__ float shared[32];
  float s = 0.f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_f32(x[i]);
    s += v * v;
  }
  s = nfn::cuda::block_sum(s, shared);
  if (threadIdx.x == 0) *out = s;
}

// x /= 1.01 sqrt(*sumsq) + 1e-6 (nanochat's normalization before the iteration).
template <typename T>
__global__ void normalize_kernel(T* x, size_t n, const float* sumsq) {
  nfn::cuda::pdl_begin();
  const float denom = sqrtf(*sumsq) * 1.01f + 1e-6f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) / denom);
}

// out = alpha u + beta v (v an f32 GEMM output); out may be u.
template <typename T>
__global__ void combine_kernel(T* out, float alpha, const T* u, float beta, const float* v, size_t n) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(alpha * to_f32(u[i]) + beta * v[i]);
}

// p -= lr (x + weight_decay p) on the master; the param copy (if any) in T.
template <typename T>
__global__ void update_kernel(float* master, T* param, const T* x, size_t n, float lr, float weight_decay) {
  nfn::cuda::pdl_begin();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float p = master[i] - lr * (to_f32(x[i]) + weight_decay * master[i]);
    master[i] = p;
    if (param != nullptr) param[i] = from_f32<T>(p);
  }
}

size_t align256(size_t bytes) { return (bytes + 255) & ~static_cast<size_t>(255); }

// One group's matrices in the scratch: X (rows, cols) and the Gram matrix A and polynomial
// P = b A + c A^2 (s, s, s the smaller side) in the op's dtype; the f32 products T and the
// norm's sum of squares.
struct Work {
  int rows, cols, s;
  bool tall;  // rows > cols: A = X^T X and X P, so the Gram matrix is the smaller one
  void *x, *a, *p;
  float *t, *sumsq;
};

size_t work_bytes(int rows, int cols, nfn_dtype dtype) {
  const size_t n = static_cast<size_t>(rows) * cols, s = std::min(rows, cols), e = nfn::cuda::dtype_size(dtype);
  return align256(n * e) + 2 * align256(s * s * e) + align256(std::max(n, s * s) * 4) + align256(4);
}

Work work_in(void* base, int rows, int cols, nfn_dtype dtype) {
  const size_t n = static_cast<size_t>(rows) * cols, s = std::min(rows, cols), e = nfn::cuda::dtype_size(dtype);
  char* at = static_cast<char*>(base);
  Work w{rows, cols, static_cast<int>(s), rows > cols, nullptr, nullptr, nullptr, nullptr, nullptr};
  w.x = at, at += align256(n * e);
  w.a = at, at += align256(s * s * e);
  w.p = at, at += align256(s * s * e);
  w.t = reinterpret_cast<float*>(at), at += align256(std::max(n, s * s) * 4);
  w.sumsq = reinterpret_cast<float*>(at);
  return w;
}

// Row-major C (M,N) = op(A) op(B) (K inner) as cuBLASLt's column-major C^T = op(B)^T op(A)^T:
// the same memory, operands swapped. A and B in `ab`, C in `c_dtype`.
nfn_status row_major_gemm(nfn_ctx* ctx, int M, int N, int K, const void* A, int lda, bool ta, const void* B, int ldb,
                          bool tb, void* C, nfn_dtype ab, nfn_dtype c_dtype) {
  nfn::cuda::GemmArgs g;
  g.m = N, g.n = M, g.k = K;
  g.a = B, g.lda = ldb, g.trans_a = tb;
  g.b = A, g.ldb = lda, g.trans_b = ta;
  g.d = C, g.ldd = N;
  g.ab = ab, g.d_dtype = c_dtype;
  return nfn::cuda::gemm(ctx, "muon_step_many", g);
}

// One Polar Express step (a, b, c) on w.x: A = X X^T (X^T X when tall), P = b A + c A A,
// X = a X + P X (X P when tall).
template <typename T>
nfn_status polar_step(nfn_ctx* ctx, const Work& w, const float* abc, nfn_dtype dtype) {
  const size_t n = static_cast<size_t>(w.rows) * w.cols, ss = static_cast<size_t>(w.s) * w.s;
  NFN_TRY(row_major_gemm(ctx, w.s, w.s, w.tall ? w.rows : w.cols, w.x, w.cols, w.tall, w.x, w.cols, !w.tall, w.a,
                         dtype, dtype));
  NFN_TRY(row_major_gemm(ctx, w.s, w.s, w.s, w.a, w.s, false, w.a, w.s, false, w.t, dtype, NFN_F32));
  nfn::cuda::launch_kernel(ctx, combine_kernel<T>, nfn::cuda::grid_for(ss, kBlock), kBlock, 0, static_cast<T*>(w.p),
                           abc[1], static_cast<const T*>(w.a), abc[2], static_cast<const float*>(w.t), ss);
  NFN_TRY(row_major_gemm(ctx, w.rows, w.cols, w.s, w.tall ? w.x : w.p, w.tall ? w.cols : w.s, false,
                         w.tall ? w.p : w.x, w.cols, false, w.t, dtype, NFN_F32));
  nfn::cuda::launch_kernel(ctx, combine_kernel<T>, nfn::cuda::grid_for(n, kBlock), kBlock, 0, static_cast<T*>(w.x),
                           abc[0], static_cast<const T*>(w.x), 1.f, static_cast<const float*>(w.t), n);
  return NFN_OK;
}

template <typename T>
nfn_status muon_group(nfn_ctx* ctx, const nfn_muon_group& grp, const Work& w, float lr, float beta, int nesterov,
                      int ns_steps, float weight_decay, nfn_dtype dtype) {
  const size_t n = static_cast<size_t>(w.rows) * w.cols;
  const unsigned grid = std::min(nfn::cuda::grid_for(n, kBlock), 132u * 16u);
  T* x = static_cast<T*>(w.x);
  nfn::cuda::launch_kernel(ctx, momentum_kernel<T>, grid, kBlock, 0, static_cast<const T*>(grp.grad), grp.momentum, x,
                           n, beta, nesterov);
  nfn::cuda::launch_kernel(ctx, sum_squares_kernel<T>, 1u, kNormBlock, 0, static_cast<const T*>(x), n, w.sumsq);
  nfn::cuda::launch_kernel(ctx, normalize_kernel<T>, grid, kBlock, 0, x, n, static_cast<const float*>(w.sumsq));
  for (int k = 0; k < ns_steps; ++k) NFN_TRY(polar_step<T>(ctx, w, nfn::kPolarExpress[k], dtype));
  const float shape_lr = lr * std::sqrt(std::max(1.f, static_cast<float>(grp.rows) / grp.cols));
  nfn::cuda::launch_kernel(ctx, update_kernel<T>, grid, kBlock, 0, grp.master, static_cast<T*>(grp.param),
                           static_cast<const T*>(x), n, shape_lr, weight_decay);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "muon_step_many");
  return NFN_OK;
}

nfn_status check_args(nfn_ctx* ctx, const nfn_muon_group* groups, int ngroups, float lr, float momentum, int ns_steps,
                      float weight_decay) {
  const std::string bad = nfn::muon::check_args(groups, ngroups, lr, momentum, ns_steps, weight_decay);
  return bad.empty() ? NFN_OK : fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", bad.c_str());
}

}  // namespace

extern "C" {

nfn_status nfn_muon_step_many(nfn_ctx* ctx, const nfn_muon_group* host_groups, int ngroups, float lr,
                              float momentum, int nesterov, int ns_steps, float weight_decay, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "muon_step_many";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_args(ctx, host_groups, ngroups, lr, momentum, ns_steps, weight_decay));
  if (ngroups == 0) return NFN_OK;
  if (ns_steps > 0) NFN_TRY(nfn::cuda::check_gemm_setup(ctx, op));
  size_t bytes = 0;
  for (int k = 0; k < ngroups; ++k)
    bytes = std::max(bytes, work_bytes(host_groups[k].rows, host_groups[k].cols, dtype));
  void* base = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, bytes, &base, op));
  for (int k = 0; k < ngroups; ++k) {
    const nfn_muon_group& g = host_groups[k];
    const Work w = work_in(base, g.rows, g.cols, dtype);
    NFN_DISPATCH(dtype, T, NFN_TRY(muon_group<T>(ctx, g, w, lr, momentum, nesterov, ns_steps, weight_decay, dtype)));
  }
  return NFN_OK;
}

}  // extern "C"
