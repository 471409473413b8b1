// Causal flash attention on ThunderKittens (sm_90a): the tiles' products are Hopper warpgroup
// MMAs (wgmma), which nfn's own flash_mma (mma.sync) does not use. Built only when
// NFN_THUNDERKITTENS_DIR names a ThunderKittens tree at build time (tools/cuda_libs.bzl).
//
// One warpgroup (4 warps, 128 threads) a block, 64 rows a block: the forward and dq walk the
// key tiles up to the diagonal for 64 queries, dkdv the query tiles from the diagonal for 64
// keys. Each warp holds 16 of the 64 rows of every product in registers. Tiles come from
// global memory with plain 16-byte loads into shared memory, then a barrier; the products
// read shared memory directly (wgmma descriptors). The conventions are nfn's: q, k and v are
// read in place from qkv (B,T,3C) and the gradients written in place into dqkv, lse is the
// natural log of each row's softmax sum over the scaled scores (B,NH,T), and the backward is
// deterministic (dq in a kernel of its own: no atomics).
#include "kittens.cuh"

#include "cuda/tk/bridge.h"

using namespace kittens;

namespace {

constexpr int kRows = 64;  // rows of a block and of every tile
// Device code takes these by reference, so they are variables in device memory too.
__device__ constexpr float kLog2e = 1.44269504088896340736f;
__device__ constexpr float kLn2 = 0.69314718055994530942f;

// qkv, dqkv, out, dout: (B, 1, T, width) bf16, a tile's column index in units of the head size
// (q of head h is column h, k NH + h, v 2 NH + h). lse, delta: (B, NH, 1, T) f32.
using act_gl = gl<bf16, -1, -1, -1, -1>;
using stat_gl = gl<float, -1, -1, -1, -1>;

template <int D>
using tile = st_bf<kRows, D>;
using scores = rt_fl<16, kRows>;        // a warp's 16 rows of a 64 x 64 product
using scores_bf = rt_bf<16, kRows>;
template <int D>
using rows_acc = rt_fl<16, D>;          // a warp's 16 rows of a 64 x D product
using row_stats = scores::col_vec;      // one value per row of `scores`
using col_stats = scores::row_vec;      // one value per column of `scores`

// Loads issued by plain stores reach the products (the async proxy) after this fence and the
// barrier: every thread fences its own stores, then all wait.
__device__ inline void tiles_ready() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

// Sets the elements of a diagonal tile's `scores` whose column (key, or query in dkdv) lies on
// the wrong side of the row to `fill`: above the diagonal when `upper` (keys after the query),
// below it otherwise (queries before the key). The element layout is the m16n8k16
// accumulator's, as ThunderKittens keeps it: data[0] rows 0-7 / cols 0-7, data[1] rows 8-15 /
// cols 0-7, data[2] rows 0-7 / cols 8-15, data[3] rows 8-15 / cols 8-15, each two adjacent
// columns.
__device__ inline void mask_diagonal(scores& s, bool upper, float fill) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int j = 0; j < scores::width; ++j) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = warp * 16 + lane / 4 + 8 * (k & 1);
      const int col = j * 16 + (lane % 4) * 2 + 8 * (k >> 1);
      float2& v = s.tiles[0][j].data[k];
      if (upper ? col > row : col < row) v.x = fill;
      if (upper ? col + 1 > row : col + 1 < row) v.y = fill;
    }
  }
}

// A block's 64 x D result, rounded to bf16, into its tile of `g` (each warp its 16 rows).
template <int D>
__device__ inline void store_rows(act_gl& g, const rows_acc<D>& acc, const coord& at) {
  rt_bf<16, D> rounded;
  copy(rounded, acc);
  warpgroup::store(g, rounded, at);
}

// The block's tiles, in dynamic shared memory aligned for wgmma (smem_bytes below).
template <typename Tiles>
__device__ inline Tiles& shared_tiles() {
  extern __shared__ alignment_dummy smem_raw[];
  shared_allocator al(reinterpret_cast<int*>(&smem_raw[0]));
  return al.allocate<Tiles>();
}

template <int D>
struct ForwardSmem {
  tile<D> q, k, v;
};

template <int D>
struct BackwardSmem {
  tile<D> q, dout, k, v;
};

// out and lse for 64 queries (tile gridDim.x - 1 - blockIdx.x) of one (batch, head) (blockIdx.y = b NH + h).
template <int D>
__global__ void __launch_bounds__(128, 1)
    tk_forward_kernel(act_gl out, stat_gl lse, const act_gl qkv, int NH, float scale_log2) {
  ForwardSmem<D>& s = shared_tiles<ForwardSmem<D>>();
  const int i = gridDim.x - 1 - blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH;  // the longest rows first

  scores att;
  scores_bf att_bf;
  rows_acc<D> o;
  row_stats max_v, max_prev, sum_v, rescale;
  zero(o);
  neg_infty(max_v);
  zero(sum_v);

  warpgroup::load(s.q, qkv, {b, 0, i, h});
  for (int j = 0; j <= i; ++j) {
    warpgroup::load(s.k, qkv, {b, 0, j, NH + h});
    warpgroup::load(s.v, qkv, {b, 0, j, 2 * NH + h});
    tiles_ready();
    warpgroup::mm_ABt(att, s.q, s.k);
    warpgroup::mma_async_wait();
    mul(att, att, scale_log2);  // base-2 exponents from here on
    if (j == i) mask_diagonal(att, true, -INFINITY);
    // Online softmax: every row has at least one key in every tile it visits (key 0 of its
    // first, its own in the diagonal one), so no row's max is -inf.
    copy(max_prev, max_v);
    row_max(max_v, att, max_v);
    sub_row(att, att, max_v);
    exp2(att, att);
    sub(rescale, max_prev, max_v);
    exp2(rescale, rescale);
    mul(sum_v, sum_v, rescale);
    row_sum(sum_v, att, sum_v);
    mul_row(o, o, rescale);
    copy(att_bf, att);
    warpgroup::mma_AB(o, att_bf, s.v);
    warpgroup::mma_async_wait();
    __syncthreads();  // every warp is done with k and v before they are loaded again
  }
  div_row(o, o, sum_v);
  store_rows<D>(out, o, {b, 0, i, h});
  // lse = ln(sum) + max, back from base 2 to the natural log of the scaled scores.
  log2(sum_v, sum_v);
  add(sum_v, sum_v, max_v);
  mul(sum_v, sum_v, kLn2);
  warpgroup::store(lse, sum_v, {b, h, 0, i});
}

// dk and dv for 64 keys (blockIdx.x) of one (batch, head), over the query tiles from the
// diagonal on. Products are transposed (rows are keys): P^T = exp2(K Q^T scale - lse),
// dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q (times scale at the end).
template <int D>
__global__ void __launch_bounds__(128, 1)
    tk_dkdv_kernel(act_gl dqkv, const act_gl dout, const act_gl qkv, const stat_gl lse, const stat_gl delta,
                   int NH, int tiles, float scale, float scale_log2) {
  BackwardSmem<D>& s = shared_tiles<BackwardSmem<D>>();
  const int j = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH;

  scores pt, dpt;
  scores_bf pt_bf, dst_bf;
  rows_acc<D> dk, dv;
  col_stats lse_c, delta_c;
  zero(dk);
  zero(dv);

  warpgroup::load(s.k, qkv, {b, 0, j, NH + h});
  warpgroup::load(s.v, qkv, {b, 0, j, 2 * NH + h});
  for (int i = j; i < tiles; ++i) {
    warpgroup::load(s.q, qkv, {b, 0, i, h});
    warpgroup::load(s.dout, dout, {b, 0, i, h});
    load(lse_c, lse, {b, h, 0, i});  // every warp: the 64 queries of the columns
    load(delta_c, delta, {b, h, 0, i});
    mul(lse_c, lse_c, kLog2e);
    tiles_ready();
    warpgroup::mm_ABt(pt, s.k, s.q);
    warpgroup::mm_ABt(dpt, s.v, s.dout);
    warpgroup::mma_async_wait();
    mul(pt, pt, scale_log2);
    sub_col(pt, pt, lse_c);
    exp2(pt, pt);
    if (i == j) mask_diagonal(pt, false, 0.f);  // queries before the key see none of it
    copy(pt_bf, pt);
    sub_col(dpt, dpt, delta_c);
    mul(dpt, dpt, pt);
    copy(dst_bf, dpt);
    warpgroup::mma_AB(dv, pt_bf, s.dout);
    warpgroup::mma_AB(dk, dst_bf, s.q);
    warpgroup::mma_async_wait();
    __syncthreads();  // every warp is done with q and dout before they are loaded again
  }
  mul(dk, dk, scale);
  store_rows<D>(dqkv, dk, {b, 0, j, NH + h});
  store_rows<D>(dqkv, dv, {b, 0, j, 2 * NH + h});
}

// dq for 64 queries (tile gridDim.x - 1 - blockIdx.x) of one (batch, head), over the key tiles up to the diagonal:
// P = exp2(Q K^T scale - lse), dP = dO V^T, dS = P (dP - delta), dQ += dS K (times scale).
template <int D>
__global__ void __launch_bounds__(128, 1)
    tk_dq_kernel(act_gl dqkv, const act_gl dout, const act_gl qkv, const stat_gl lse, const stat_gl delta,
                 int NH, float scale, float scale_log2) {
  BackwardSmem<D>& s = shared_tiles<BackwardSmem<D>>();
  const int i = gridDim.x - 1 - blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH;  // the longest rows first

  scores p, dp;
  scores_bf ds_bf;
  rows_acc<D> dq;
  row_stats lse_r, delta_r;
  zero(dq);

  warpgroup::load(s.q, qkv, {b, 0, i, h});
  warpgroup::load(s.dout, dout, {b, 0, i, h});
  warpgroup::load(lse_r, lse, {b, h, 0, i});  // each warp: its 16 queries
  warpgroup::load(delta_r, delta, {b, h, 0, i});
  mul(lse_r, lse_r, kLog2e);
  for (int j = 0; j <= i; ++j) {
    warpgroup::load(s.k, qkv, {b, 0, j, NH + h});
    warpgroup::load(s.v, qkv, {b, 0, j, 2 * NH + h});
    tiles_ready();
    warpgroup::mm_ABt(p, s.q, s.k);
    warpgroup::mm_ABt(dp, s.dout, s.v);
    warpgroup::mma_async_wait();
    mul(p, p, scale_log2);
    sub_row(p, p, lse_r);
    exp2(p, p);
    if (j == i) mask_diagonal(p, true, 0.f);  // keys after the query
    sub_row(dp, dp, delta_r);
    mul(dp, dp, p);
    copy(ds_bf, dp);
    warpgroup::mma_AB(dq, ds_bf, s.k);
    warpgroup::mma_async_wait();
    __syncthreads();  // every warp is done with k and v before they are loaded again
  }
  mul(dq, dq, scale);
  store_rows<D>(dqkv, dq, {b, 0, i, h});
}

// Raises a kernel's dynamic shared memory limit (needed above 48 KiB) and launches it.
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, size_t smem, dim3 grid, cudaStream_t stream, Args... args) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  kernel<<<grid, 128, smem, stream>>>(args...);
  return cudaGetLastError();
}

// Room for the allocator to align the first tile to 1024 bytes (wgmma's swizzle).
template <typename Smem>
constexpr size_t smem_bytes() { return sizeof(Smem) + 1024; }

template <int D>
cudaError_t forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  act_gl out_g(static_cast<bf16*>(out), B, 1, T, C);
  act_gl qkv_g(static_cast<bf16*>(const_cast<void*>(qkv)), B, 1, T, 3 * C);
  stat_gl lse_g(lse, B, NH, 1, T);
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));
  return launch(tk_forward_kernel<D>, smem_bytes<ForwardSmem<D>>(), dim3(T / kRows, B * NH), stream, out_g, lse_g,
                qkv_g, NH, scale_log2);
}

template <int D>
cudaError_t backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta, int B,
                     int T, int C, int NH, cudaStream_t stream) {
  act_gl dqkv_g(static_cast<bf16*>(dqkv), B, 1, T, 3 * C);
  act_gl dout_g(static_cast<bf16*>(const_cast<void*>(dout)), B, 1, T, C);
  act_gl qkv_g(static_cast<bf16*>(const_cast<void*>(qkv)), B, 1, T, 3 * C);
  stat_gl lse_g(const_cast<float*>(lse), B, NH, 1, T);
  stat_gl delta_g(const_cast<float*>(delta), B, NH, 1, T);
  const float scale = 1.f / sqrtf(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  const dim3 grid(T / kRows, B * NH);
  cudaError_t err = launch(tk_dkdv_kernel<D>, smem_bytes<BackwardSmem<D>>(), grid, stream, dqkv_g, dout_g, qkv_g, lse_g,
                           delta_g, NH, T / kRows, scale, scale_log2);
  if (err != cudaSuccess) return err;
  return launch(tk_dq_kernel<D>, smem_bytes<BackwardSmem<D>>(), grid, stream, dqkv_g, dout_g, qkv_g, lse_g, delta_g, NH,
                scale, scale_log2);
}

}  // namespace

extern "C" {

const char* nfn_tk_unavailable_reason(void) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return "the ThunderKittens attention kernels are built (sm_90a), but there is no CUDA device to run them";
  }
  if (major != 9)
    return "the ThunderKittens attention kernels are built for sm_90a (H100/H200) only, and this device is not "
           "sm_90";
  return nullptr;
}

int nfn_tk_attention_applies(int T, int head_dim) {
  return T % kRows == 0 && (head_dim == 64 || head_dim == 128);
}

int nfn_tk_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (!nfn_tk_attention_applies(T, C / NH)) return cudaErrorInvalidValue;
  return C / NH == 64 ? forward<64>(out, lse, qkv, B, T, C, NH, s) : forward<128>(out, lse, qkv, B, T, C, NH, s);
}

int nfn_tk_attention_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                              int B, int T, int C, int NH, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (!nfn_tk_attention_applies(T, C / NH)) return cudaErrorInvalidValue;
  return C / NH == 64 ? backward<64>(dqkv, dout, qkv, lse, delta, B, T, C, NH, s)
                      : backward<128>(dqkv, dout, qkv, lse, delta, B, T, C, NH, s);
}

}  // extern "C"
