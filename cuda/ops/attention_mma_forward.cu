// Causal flash attention forward on tensor cores ("flash_mma"), FlashAttention-2 style: a
// block of 4 warps owns 64 query rows of one (batch, query head), 16 per warp, with Q held as
// mma fragments in registers; 64-key tiles of its kv head's K and V, from the first its rows'
// windows reach, pass through shared memory, double-buffered with cp.async (tile n + 1 lands
// while tile n is used), and ldmatrix loads the fragments;
// S = Q K^T and O += P V run as mma.sync m16n8k16 (bf16 in, f32 accumulators); the online
// softmax stays in registers in f32. Same outputs and lse convention as flash_simt (attention_forward.cu).
#include "cuda/ops/attention_mma.cuh"
#include "cuda/ops/launch.h"

namespace nfn::cuda::attention::mma_path {
namespace {

// Two buffers, each a K tile and a V tile: tile n is read from buffer n % 2 while tile n + 1
// lands in the other.
template <int HD>
constexpr size_t forward_smem_bytes() { return sizeof(uint16_t) * 4 * kBlockRows * stride<HD>(); }

// grid (ceil(T / 64), B * NH), kThreads threads, forward_smem_bytes<HD>() dynamic shared
// memory. scale_log2 = log2(e) / sqrt(HD): scores are kept in base 2 (exp2f) and turned back
// into natural-log units for lse.
template <int HD>
__global__ void __launch_bounds__(kThreads, 2)
    forward_kernel(bf16* out, float* lse, const bf16* qkv, QkvIndex ix, float scale_log2) {
  nfn::cuda::pdl_begin();
  constexpr int S = stride<HD>(), kSteps = HD / 16, kDimTiles = HD / 8, kKeyTiles = kBlockRows / 8;
  constexpr int kTile = kBlockRows * S;
  extern __shared__ uint4 smem_raw[];
  uint16_t* const tiles = reinterpret_cast<uint16_t*>(smem_raw);  // buffer b: K at 2b, V at 2b + 1
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH, kv = h / ix.group();
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;  // the longest rows start first
  const int row0 = q0 + 16 * warp;                             // the warp's first query
  const int rows[2] = {row0 + c_row(lane, 0), row0 + c_row(lane, 2)};  // accumulator rows i < 2, i >= 2
  const int lo[2] = {ix.first_key(rows[0]), ix.first_key(rows[1])};     // their first keys
  const size_t ld = ix.ld;
  const bf16* q_base = qkv + ix.q(b, h, 0, HD);
  const bf16* k_base = qkv + ix.k(b, kv, 0, HD);
  const bf16* v_base = qkv + ix.v(b, kv, 0, HD);
  const int k_first = ix.first_key(q0) / kBlockRows * kBlockRows;  // the first tile a row of the block sees

  // The first key tile on its way into buffer 0; Q's fragments staged through buffer 1.
  load_tile<HD, kBlockRows>(tiles, k_base, ld, k_first, ix.T);
  load_tile<HD, kBlockRows>(tiles + kTile, v_base, ld, k_first, ix.T);
  load_tile<HD, kBlockRows>(tiles + 2 * kTile, q_base, ld, q0, ix.T);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) load_a(qa[kk], tiles + 2 * kTile, S, 16 * warp, 16 * kk, lane);

  float o[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max (base-2 units) of rows[0], rows[1]
  float l[2] = {0.f, 0.f};              // this lane's part of the running sum of exp2(s - m)

  // Key tiles up to the diagonal one (k0 == q0); q0 < T, so every tile holds a key k0 < T. A
  // row may see no key of a tile its window starts after: its max stays -inf until one does.
  for (int k0 = k_first, buf = 0; k0 <= q0; k0 += kBlockRows, buf ^= 1) {
    const uint16_t* ks = tiles + 2 * buf * kTile;
    const uint16_t* vs = ks + kTile;
    __syncthreads();  // the other buffer (Q, or the previous tile) is no longer read
    if (k0 + kBlockRows <= q0) {  // the next tile starts landing there while this one is used
      uint16_t* next = tiles + 2 * (buf ^ 1) * kTile;
      load_tile<HD, kBlockRows>(next, k_base, ld, k0 + kBlockRows, ix.T);
      load_tile<HD, kBlockRows>(next + kTile, v_base, ld, k0 + kBlockRows, ix.T);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this thread's copies of this tile have landed
    __syncthreads();     // and everyone's
    if (row0 >= ix.T) continue;  // the warp's rows are all past T (it still joins the barriers)

    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int j = 0; j < kKeyTiles; j += 2) {
        uint32_t kb[2][2];
        load_b_transposed(kb, ks, S, 8 * j, 16 * kk, lane);
        mma_bf16(s[j], qa[kk], kb[0]);
        mma_bf16(s[j + 1], qa[kk], kb[1]);
      }

    // Scale into base 2; mask keys after the row (diagonal tile), at/after T (last tile) or
    // before the row's window (its first tiles).
    const bool edge = k0 + kBlockRows > row0 || k0 + kBlockRows > ix.T || k0 < ix.first_key(row0 + 15);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + 8 * j + c_col(lane, i), r = i >> 1;
        float x = s[j][i] * scale_log2;
        if (edge && (key > rows[r] || key >= ix.T || key < lo[r])) x = -INFINITY;
        s[j][i] = x;
        mx[r] = fmaxf(mx[r], x);
      }
    float base[2];  // what exp2 subtracts: the max, or 0 while a row has seen no key (all -inf)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);  // the 4 lanes of a quad share rows
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];
      const float correction = exp2f(m[r] - base[r]);  // 0 on the row's first keys (m = -inf)
      m[r] = mx[r];
      l[r] *= correction;
#pragma unroll
      for (int j = 0; j < kDimTiles; ++j) o[j][2 * r] *= correction, o[j][2 * r + 1] *= correction;
    }
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[j][i] = exp2f(s[j][i] - base[i >> 1]);  // masked: exp2(-inf) = 0
        l[i >> 1] += s[j][i];
      }

    // O += P V over the tile's 64 keys, 16 at a time; P (bf16) comes straight from s.
    accumulate_product(o, s, vs, S, lane);
  }
  if (row0 >= ix.T) return;

  bf16* o_base = out + ix.out(b, h, 0, HD);
  float* lse_base = lse + (static_cast<size_t>(b) * ix.NH + h) * ix.T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    if (rows[r] >= ix.T) continue;
    const float inv = 1.f / sum;
    bf16* orow = o_base + static_cast<size_t>(rows[r]) * ix.C;
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j)
      store_pair(orow + 8 * j + c_col(lane, 2 * r), o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (quad_of(lane) == 0) lse_base[rows[r]] = m[r] * kLn2 + logf(sum);  // natural log, scaled scores
  }
}

template <int HD>
nfn_status launch_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, const QkvIndex& ix) {
  const char* op = "attention_forward (flash_mma)";
  // Above 48 KiB (head sizes 96 and up) a kernel must opt in, on every call: the setting
  // belongs to the current device (see attention_backward.cu).
  constexpr size_t smem = forward_smem_bytes<HD>();
  static_assert(smem <= 99 * 1024, "flash_mma's forward must fit sm_120's 99 KiB a block");
  NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(forward_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)), op);
  dim3 grid((ix.T + kBlockRows - 1) / kBlockRows, B * ix.NH);
  nfn::cuda::launch_kernel(ctx, forward_kernel<HD>, grid, kThreads, smem, static_cast<bf16*>(out), lse,
                           static_cast<const bf16*>(qkv), ix, kLog2e / sqrtf(static_cast<float>(HD)));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace
}  // namespace nfn::cuda::attention::mma_path

namespace nfn::cuda::attention {

nfn_status mma_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, const QkvIndex& ix, int hd) {
  NFN_MMA_HEAD_DISPATCH(mma_path::launch_forward, hd, ctx, out, lse, qkv, B, ix)
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_forward (flash_mma): head size %d is not a multiple of 16 up to "
              "128", hd);
}

}  // namespace nfn::cuda::attention
