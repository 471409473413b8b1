// Causal flash attention backward on tensor cores ("flash_mma"), deterministic like
// flash_simt: probabilities are recomputed from the saved lse, and two kernels each own what
// they write (no atomics). delta = rowsum(dout * out) comes from attention_backward.cu.
//   dkdv: a block owns 64 keys (16 per warp) of a kv head and walks, for each of the kv head's
//         query heads, the query tiles from them to the last that sees them (its window):
//         S^T = K Q^T, P^T = exp(S^T * scale - lse), dP^T = V dO^T, dS^T = P^T (dP^T - delta),
//         dV += P^T dO, dK += dS^T Q; then dK *= scale.
//   dq:   a block owns 64 queries (16 per warp) of a query head and walks its kv head's key
//         tiles from the first its rows' windows reach up to the diagonal:
//         S = Q K^T, P, dP = dO V^T, dS, dQ += dS K; then dQ *= scale.
// The tiles a block walks are double-buffered in shared memory (cp.async: tile n + 1 lands
// while tile n is used) and ldmatrix loads the fragments. Every product is mma.sync m16n8k16
// with bf16 operands (P and dS rounded to bf16) and f32 accumulators; the accumulator tiles
// of P^T / dS^T / dS feed the next product as A fragments in place (mma_layout.h).
#include "cuda/ops/attention_mma.cuh"
#include "cuda/ops/launch.h"

namespace nfn::cuda::attention::mma_path {
namespace {

// Queries per dkdv tile: 32 above head size 64 keeps dK, dV, S^T and dP^T in registers.
template <int HD>
constexpr int dkdv_query_tile() { return HD <= 64 ? 64 : 32; }

// dkdv: the block's K and V tiles, then two buffers of a query tile (Q, dO, lse, delta): tile
// n is read from buffer n % 2 while tile n + 1 lands in the other.
template <int HD>
constexpr size_t dkdv_smem_bytes() {
  constexpr int BQ = dkdv_query_tile<HD>();
  return sizeof(uint16_t) * (2 * kBlockRows + 4 * BQ) * stride<HD>() + 4 * sizeof(float) * BQ;
}

// The smallest dynamic shared memory a block may opt in to on the architectures built for
// (sm_120's 99 KiB; sm_90's is 227 KiB).
constexpr size_t kSmallestSharedOptIn = 99 * 1024;

// dq: the block's Q and dO tiles, then kBuffers buffers of a key tile (K, V): with two, tile
// n + 1 lands while tile n is used; with one (where two do not fit the device: head size
// 128 on sm_120's 99 KiB) tile n is copied when it is needed.
template <int HD, int kBuffers>
constexpr size_t dq_smem_bytes() { return sizeof(uint16_t) * (2 + 2 * kBuffers) * kBlockRows * stride<HD>(); }

struct Tensors {
  bf16* dqkv;
  const bf16* dout;
  const bf16* qkv;
  const float* lse;
  const float* delta;
};

// The two products a tile needs at once, sharing their loop over the head dimension (kSteps
// steps of 16): x = A B^T and y = C D^T, where A and C are the warp's 16 rows (of a and c)
// and B and D give kTiles tiles of 8 rows each (of b and d). dkdv: S^T = K Q^T and
// dP^T = V dO^T; dq: S = Q K^T and dP = dO V^T.
template <int kTiles, int kSteps>
__device__ __forceinline__ void paired_products(float (&x)[kTiles][4], float (&y)[kTiles][4], const uint16_t* a,
                                                const uint16_t* b, const uint16_t* c, const uint16_t* d, int S,
                                                int warp, int lane) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) x[j][i] = y[j][i] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    uint32_t af[4], cf[4];
    load_a(af, a, S, 16 * warp, 16 * kk, lane);
    load_a(cf, c, S, 16 * warp, 16 * kk, lane);
#pragma unroll
    for (int j = 0; j < kTiles; j += 2) {
      uint32_t bf[2][2], df[2][2];
      load_b_transposed(bf, b, S, 8 * j, 16 * kk, lane);
      mma_bf16(x[j], af, bf[0]);
      mma_bf16(x[j + 1], af, bf[1]);
      load_b_transposed(df, d, S, 8 * j, 16 * kk, lane);
      mma_bf16(y[j], cf, df[0]);
      mma_bf16(y[j + 1], cf, df[1]);
    }
  }
}

// grid (ceil(T / 64), B * NKV), kThreads threads, dkdv_smem_bytes<HD>() dynamic shared memory.
template <int HD>
__global__ void __launch_bounds__(kThreads, 2)
    dkdv_kernel(Tensors g, QkvIndex ix, float scale, float scale_log2) {
  nfn::cuda::pdl_begin();
  constexpr int S = stride<HD>(), BQ = dkdv_query_tile<HD>();
  constexpr int kSteps = HD / 16, kDimTiles = HD / 8, kQueryTiles = BQ / 8;
  extern __shared__ uint4 smem_raw[];
  uint16_t* const ks = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const vs = ks + kBlockRows * S;
  uint16_t* const query_tiles = vs + kBlockRows * S;  // buffer b: Q at 2b, dO at 2b + 1 (BQ * S each)
  float* const stats = reinterpret_cast<float*>(query_tiles + 4 * BQ * S);  // buffer b: lse at 2b, delta at 2b + 1

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / ix.NKV, kv = blockIdx.y % ix.NKV;
  const int k0 = blockIdx.x * kBlockRows;  // low key blocks see the most queries: they start first
  const int key0 = k0 + 16 * warp;         // the warp's first key
  const int keys[2] = {key0 + c_row(lane, 0), key0 + c_row(lane, 2)};
  const size_t ld = ix.ld;
  // Query tiles n = 0, 1, ...: query head kv * group() + n / per_head, queries from
  // k0 + (n % per_head) * BQ up to i_end (past the last query that sees the block's keys).
  const int i_end = ix.query_end(min(ix.T, k0 + kBlockRows));
  const int per_head = (i_end - k0 + BQ - 1) / BQ, tiles = per_head * ix.group();

  // Query tile n into buffer `buf`: Q and dO by cp.async, lse (in base-2 units) and delta by
  // plain stores; all of it visible after the next cp_async_wait and barrier.
  auto load_query_tile = [&](int buf, int n) {
    const int h = kv * ix.group() + n / per_head, i0 = k0 + n % per_head * BQ;
    const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;
    load_tile<HD, BQ>(query_tiles + 2 * buf * BQ * S, g.qkv + ix.q(b, h, 0, HD), ld, i0, ix.T);
    load_tile<HD, BQ>(query_tiles + (2 * buf + 1) * BQ * S, g.dout + ix.out(b, h, 0, HD), ix.C, i0, ix.T);
    for (int r = threadIdx.x; r < BQ; r += kThreads) {
      const bool in = i0 + r < ix.T;
      stats[2 * buf * BQ + r] = in ? g.lse[stat + i0 + r] * kLog2e : 0.f;
      stats[(2 * buf + 1) * BQ + r] = in ? g.delta[stat + i0 + r] : 0.f;
    }
  };
  load_tile<HD, kBlockRows>(ks, g.qkv + ix.k(b, kv, 0, HD), ld, k0, ix.T);
  load_tile<HD, kBlockRows>(vs, g.qkv + ix.v(b, kv, 0, HD), ld, k0, ix.T);
  load_query_tile(0, 0);
  cp_async_commit();

  float dk[kDimTiles][4], dv[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[j][i] = dv[j][i] = 0.f;

  // Query tiles from the block's first key on (queries before it see none of its keys).
  for (int n = 0, buf = 0; n < tiles; ++n, buf ^= 1) {
    const int i0 = k0 + n % per_head * BQ;
    const uint16_t* qs = query_tiles + 2 * buf * BQ * S;
    const uint16_t* dos = qs + BQ * S;
    const float* lse_s = stats + 2 * buf * BQ;
    const float* delta_s = lse_s + BQ;
    __syncthreads();  // the other buffer (the previous tile) is no longer read
    if (n + 1 < tiles) load_query_tile(buf ^ 1, n + 1);  // lands while this one is used
    cp_async_commit();
    cp_async_wait<1>();  // this thread's copies of this tile have landed
    __syncthreads();     // and everyone's
    // Nothing to do when the warp's keys are all past T, all after the tile's last query, or
    // all before the window of its first.
    if (key0 >= ix.T || i0 + BQ - 1 < key0 || !ix.in_window(i0, key0 + 15)) continue;

    float st[kQueryTiles][4], dpt[kQueryTiles][4];  // S^T then P^T; dP^T then dS^T
    paired_products<kQueryTiles, kSteps>(st, dpt, ks, qs, vs, dos, S, warp, lane);

    // Query i sees key j only when j <= i <= j + window; queries at or past T see nothing.
    const bool edge = i0 < key0 + 16 || i0 + BQ > ix.T || !ix.in_window(i0 + BQ - 1, key0);
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 8 * j + c_col(lane, i), query = i0 + col, key = keys[i >> 1];
        float p = exp2f(st[j][i] * scale_log2 - lse_s[col]);
        if (edge && (query < key || query >= ix.T || !ix.in_window(query, key))) p = 0.f;
        st[j][i] = p;
        dpt[j][i] = p * (dpt[j][i] - delta_s[col]);
      }

    // dV += P^T dO and dK += dS^T Q over the tile's queries, 16 at a time.
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      accumulators_to_a(pa, st[2 * kk], st[2 * kk + 1]);
      accumulators_to_a(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int j = 0; j < kDimTiles; j += 2) {
        uint32_t dob[2][2], qb[2][2];
        load_b(dob, dos, S, 16 * kk, 8 * j, lane);
        mma_bf16(dv[j], pa, dob[0]);
        mma_bf16(dv[j + 1], pa, dob[1]);
        load_b(qb, qs, S, 16 * kk, 8 * j, lane);
        mma_bf16(dk[j], dsa, qb[0]);
        mma_bf16(dk[j + 1], dsa, qb[1]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= ix.T) continue;
    bf16* krow = g.dqkv + ix.k(b, kv, keys[r], HD);
    bf16* vrow = g.dqkv + ix.v(b, kv, keys[r], HD);
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) {
      const int d = 8 * j + c_col(lane, 2 * r);
      store_pair(krow + d, dk[j][2 * r] * scale, dk[j][2 * r + 1] * scale);
      store_pair(vrow + d, dv[j][2 * r], dv[j][2 * r + 1]);
    }
  }
}

// grid (ceil(T / 64), B * NH), kThreads threads, dq_smem_bytes<HD, kBuffers>() dynamic shared
// memory.
template <int HD, int kBuffers>
__global__ void __launch_bounds__(kThreads, 2)
    dq_kernel(Tensors g, QkvIndex ix, float scale, float scale_log2) {
  nfn::cuda::pdl_begin();
  constexpr int S = stride<HD>(), kSteps = HD / 16, kDimTiles = HD / 8, kKeyTiles = kBlockRows / 8;
  constexpr int kTile = kBlockRows * S;
  extern __shared__ uint4 smem_raw[];
  uint16_t* const qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const dos = qs + kTile;
  uint16_t* const key_tiles = dos + kTile;  // buffer b: K at 2b, V at 2b + 1

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / ix.NH, h = blockIdx.y % ix.NH, kv = h / ix.group();
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;  // the longest rows start first
  const int row0 = q0 + 16 * warp;
  const int rows[2] = {row0 + c_row(lane, 0), row0 + c_row(lane, 2)};
  const int lo[2] = {ix.first_key(rows[0]), ix.first_key(rows[1])};  // their first keys
  const size_t ld = ix.ld;
  const size_t stat = (static_cast<size_t>(b) * ix.NH + h) * ix.T;

  load_tile<HD, kBlockRows>(qs, g.qkv + ix.q(b, h, 0, HD), ld, q0, ix.T);
  load_tile<HD, kBlockRows>(dos, g.dout + ix.out(b, h, 0, HD), ix.C, q0, ix.T);
  // Tile n (keys from n * 64) lives in buffer n % kBuffers and is copied at iteration
  // n - (kBuffers - 1); the first is the one the block's first row's window starts in.
  auto load_key_tile = [&](int n) {
    uint16_t* dst = key_tiles + 2 * (n % kBuffers) * kTile;
    load_tile<HD, kBlockRows>(dst, g.qkv + ix.k(b, kv, 0, HD), ld, n * kBlockRows, ix.T);
    load_tile<HD, kBlockRows>(dst + kTile, g.qkv + ix.v(b, kv, 0, HD), ld, n * kBlockRows, ix.T);
  };
  const int n_first = ix.first_key(q0) / kBlockRows;
  if (kBuffers == 2) load_key_tile(n_first);
  cp_async_commit();
  float row_lse[2], row_delta[2];  // lse in base-2 units
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = rows[r] < ix.T;
    row_lse[r] = in ? g.lse[stat + rows[r]] * kLog2e : 0.f;
    row_delta[r] = in ? g.delta[stat + rows[r]] : 0.f;
  }

  float dq[kDimTiles][4];
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;

  for (int n = n_first, k0 = n_first * kBlockRows; k0 <= q0; ++n, k0 += kBlockRows) {
    const uint16_t* ks = key_tiles + 2 * (n % kBuffers) * kTile;
    const uint16_t* vs = ks + kTile;
    __syncthreads();  // the buffer about to be refilled (an earlier tile) is no longer read
    if (k0 + (kBuffers - 1) * kBlockRows <= q0) load_key_tile(n + kBuffers - 1);
    cp_async_commit();
    cp_async_wait<kBuffers - 1>();  // this thread's copies of this tile (the first: and Q, dO) have landed
    __syncthreads();                // and everyone's
    if (row0 >= ix.T) continue;

    float s[kKeyTiles][4], dp[kKeyTiles][4];  // S then P; dP then dS
    paired_products<kKeyTiles, kSteps>(s, dp, qs, ks, dos, vs, S, warp, lane);

    const bool edge = k0 + kBlockRows > row0 || k0 + kBlockRows > ix.T || k0 < ix.first_key(row0 + 15);
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + 8 * j + c_col(lane, i), r = i >> 1;
        float p = exp2f(s[j][i] * scale_log2 - row_lse[r]);
        if (edge && (key > rows[r] || key >= ix.T || key < lo[r])) p = 0.f;
        dp[j][i] = p * (dp[j][i] - row_delta[r]);
      }

    // dQ += dS K over the tile's 64 keys, 16 at a time.
    accumulate_product(dq, dp, ks, S, lane);
  }
  if (row0 >= ix.T) return;

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= ix.T) continue;
    bf16* qrow = g.dqkv + ix.q(b, h, rows[r], HD);
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j)
      store_pair(qrow + 8 * j + c_col(lane, 2 * r), dq[j][2 * r] * scale, dq[j][2 * r + 1] * scale);
  }
}

template <int HD, int kBuffers>
nfn_status launch_dq(nfn_ctx* ctx, const Tensors& g, const QkvIndex& ix, dim3 grid, float scale, const char* op) {
  constexpr size_t smem = dq_smem_bytes<HD, kBuffers>();
  NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(dq_kernel<HD, kBuffers>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)), op);
  nfn::cuda::launch_kernel(ctx, dq_kernel<HD, kBuffers>, grid, kThreads, smem, g, ix, scale, scale * kLog2e);
  return NFN_OK;
}

template <int HD>
nfn_status launch_backward(nfn_ctx* ctx, const Tensors& g, int B, const QkvIndex& ix) {
  static_assert(dkdv_smem_bytes<HD>() <= kSmallestSharedOptIn && dq_smem_bytes<HD, 1>() <= kSmallestSharedOptIn,
                "flash_mma's backward must fit sm_120's 99 KiB a block (dq single-buffered)");
  const char* op = "attention_backward (flash_mma)";
  // Above 48 KiB a kernel must opt in to more dynamic shared memory, on every call: the
  // setting belongs to the current device (see attention_backward.cu).
  NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(dkdv_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(dkdv_smem_bytes<HD>())), op);
  const float scale = 1.f / sqrtf(static_cast<float>(HD));
  const int tiles = (ix.T + kBlockRows - 1) / kBlockRows;
  nfn::cuda::launch_kernel(ctx, dkdv_kernel<HD>, dim3(tiles, B * ix.NKV), kThreads, dkdv_smem_bytes<HD>(), g, ix,
                           scale, scale * kLog2e);
  const dim3 grid(tiles, B * ix.NH);
  if constexpr (dq_smem_bytes<HD, 2>() <= kSmallestSharedOptIn) {
    const nfn_status s = launch_dq<HD, 2>(ctx, g, ix, grid, scale, op);
    if (s != NFN_OK) return s;
  } else {  // head size 128: double-buffered where the device allows it (sm_90: 227 KiB)
    int optin = 0;  // the most dynamic shared memory a block of this device may opt in to
    NFN_CUDA_TRY(ctx, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device), op);
    const bool double_buffered = dq_smem_bytes<HD, 2>() <= static_cast<size_t>(optin);
    const nfn_status s = double_buffered ? launch_dq<HD, 2>(ctx, g, ix, grid, scale, op)
                                         : launch_dq<HD, 1>(ctx, g, ix, grid, scale, op);
    if (s != NFN_OK) return s;
  }
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // namespace
}  // namespace nfn::cuda::attention::mma_path

namespace nfn::cuda::attention {

nfn_status mma_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const float* lse,
                        const float* delta, int B, const QkvIndex& ix, int hd) {
  const mma_path::Tensors g{static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                            static_cast<const bf16*>(qkv), lse, delta};
  NFN_MMA_HEAD_DISPATCH(mma_path::launch_backward, hd, ctx, g, B, ix)
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_backward (flash_mma): head size %d is not a multiple of 16 up to "
              "128", hd);
}

}  // namespace nfn::cuda::attention
