// LayerNorm and RMSNorm, one kernel template each way (kCentered: LayerNorm, which subtracts
// the mean and may add a bias). A warp owns a row; statistics are f32; rows move 16 bytes a
// load where C and the pointers allow it (Pack), one element a load otherwise. Where a lane
// has few packs of a bf16 row (at most 4 forward, 3 backward: C up to 1,024 and 768), it
// loads them all at once and keeps them in registers (P, its packs); otherwise (P = 0) each
// pass over the row loads it again, the passes after the first from L1.
//
// The backward reads dout and inp once: each warp adds its rows' input gradient to dinp and
// sums the weight and bias gradient terms of its rows (and, for LayerNorm's dinp_colsum, the
// rows of dinp it leaves) into its own columns in shared memory; each block then adds its
// warps' columns, in warp order, into an f32 partial, and a last kernel adds the blocks'
// partials, in a fixed order, to dweight, dbias and dinp_colsum (column_reduce.cuh).
// Rows go to blocks and warps by a fixed rule, so the result is deterministic.
#include <algorithm>
#include <string>
#include <type_traits>

#include "cc/ops/norm_args.h"
#include "cuda/ops/column_reduce.cuh"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;
using nfn::cuda::warp_sum;

namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;            // warps per block, one row at a time each
// The backward's grid, at most: one wave, of 4 blocks an SM where each streams its rows (48
// KiB of shared memory and 256 threads of at most 64 registers a block fit 4), 2 where its
// lanes hold their packs (up to 128 registers: at the 64 or 80 of 4 or 3 blocks an SM, ptxas
// spills GPT-2's 3 packs a lane). Streaming, 256 blocks (2 an SM) run GPT-2's 16384 x 768
// rows in 57 us on an H200, 1.75 TB/s: too few loads in flight; 512 blocks take 45 us.
constexpr int kBackwardBlocksPerSm = 4, kHeldBackwardBlocksPerSm = 2;
constexpr size_t kDefaultShared = 48 << 10;  // dynamic shared memory without opting in
constexpr size_t kReservedShared = 1 << 10;  // what the hardware keeps of an SM's per block

// f(k, i) for each pack i of a row that lane `lane` owns (lane, lane + 32, ...; k counts them):
// P > 0 unrolled over the lane's at most P packs, P = 0 a loop.
template <int P, typename F>
__device__ __forceinline__ void lane_packs(int lane, int packs, F&& f) {
  if constexpr (P > 0) {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (lane + 32 * k < packs) f(k, lane + 32 * k);
  } else {
    for (int i = lane; i < packs; i += 32) f(0, i);
  }
}

// A row's packs as a lane holds them: with P > 0, loaded once (load) and read from registers
// (get); with P = 0, get loads pack i again each time it is asked.
template <int P, int V, typename T>
struct RowPacks {
  Pack<T, V> held[P > 0 ? P : 1];
  __device__ __forceinline__ void load(const T* row, int k, int i) {
    if constexpr (P > 0) held[k] = reinterpret_cast<const Pack<T, V>*>(row)[i];
  }
  __device__ __forceinline__ void get(const T* row, int k, int i, float (&out)[V]) const {
    if constexpr (P > 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = nfn::cuda::to_f32(held[k].v[j]);
    } else {
      load_pack(row, i, out);
    }
  }
};

// Forward: out = (x - mean) * rstd * weight + bias (LayerNorm) or x * rstd * weight
// (RMSNorm, mean 0, no bias); weight NULL reads as 1, bias NULL as 0. V elements a load.
template <bool kCentered, int V, int P, typename T>
__global__ void norm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp, const T* weight,
                                    const T* bias, int N, int C, float eps) {
  nfn::cuda::pdl_begin();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x, packs = C / V;
  if (row >= N) return;
  const T* x = inp + static_cast<size_t>(row) * C;
  RowPacks<P, V, T> xs;
  lane_packs<P>(lane, packs, [&](int k, int i) { xs.load(x, k, i); });
  float mean = 0.f;
  if constexpr (kCentered) {
    float sum = 0.f;
    lane_packs<P>(lane, packs, [&](int k, int i) {
      float v[V];
      xs.get(x, k, i, v);
      for (int j = 0; j < V; ++j) sum += v[j];
    });
    mean = warp_sum(sum) / C;
  }
  float sq = 0.f;
  lane_packs<P>(lane, packs, [&](int k, int i) {
    float v[V];
    xs.get(x, k, i, v);
    for (int j = 0; j < V; ++j) sq += (v[j] - mean) * (v[j] - mean);
  });
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
  T* y = out + static_cast<size_t>(row) * C;
  lane_packs<P>(lane, packs, [&](int k, int i) {
    float v[V], w[V], b[V];
    xs.get(x, k, i, v);
    load_pack(weight, i, w, 1.f);
    load_pack(bias, i, b);
    for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * rstd * w[j] + b[j];
    store_pack(y, i, v);
  });
  if (lane == 0) {
    if (mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

// Backward, with xhat = (x - mean) * rstd and dnorm = dout * weight:
//   dinp += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd   (RMSNorm: no mean(dnorm))
//   dweight term dout * xhat, dbias term dout (LayerNorm only), and with kColsum the term dinp
//   as left (f32, before its rounding to T): K = 1 to 3 terms a column.
// partials (NULL: no parameter gradients) gets, for each term k and block b, the sum over
// the block's rows at [k][b][c]. Shared memory holds K * C floats a warp; column c sits at
// (c % V) * (C / V) + c / V, so the lanes of a warp touch consecutive words.
// With P > 0 a lane loads its packs of dout, inp and dinp at once, before any arithmetic, so
// every load of the row is in flight together (2 blocks an SM: kHeldBackwardBlocksPerSm).
template <bool kCentered, bool kColsum>
constexpr int kBackwardTerms = (kCentered ? 2 : 1) + (kColsum ? 1 : 0);

template <bool kCentered, bool kColsum, int V, int P, typename T>
__global__ void __launch_bounds__(P > 0 ? 32 * kRowsPerBlock : 1024, P > 0 ? kHeldBackwardBlocksPerSm : 1)
    norm_backward_kernel(T* dinp, float* partials, const T* dout, const T* inp, const T* weight,
                         const float* mean, const float* rstd, int N, int C) {
  nfn::cuda::pdl_begin();
  constexpr int K = kBackwardTerms<kCentered, kColsum>;
  extern __shared__ float cols[];
  const int warps = blockDim.y, lane = threadIdx.x, packs = C / V;
  float* mine = cols + static_cast<size_t>(threadIdx.y) * K * C;
  if (partials != nullptr)
    for (int i = lane; i < packs; i += 32)
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < V; ++j) mine[k * C + j * packs + i] = 0.f;
  for (int row = blockIdx.x * warps + threadIdx.y; row < N; row += gridDim.x * warps) {
    const size_t off = static_cast<size_t>(row) * C;
    RowPacks<P, V, T> gs, xs, ds;
    lane_packs<P>(lane, packs, [&](int k, int i) {
      gs.load(dout + off, k, i);
      xs.load(inp + off, k, i);
      if (dinp != nullptr) ds.load(dinp + off, k, i);
    });
    const float m = kCentered ? mean[row] : 0.f, r = rstd[row];
    float dnorm_sum = 0.f, dnorm_xhat_sum = 0.f;
    lane_packs<P>(lane, packs, [&](int k, int i) {
      float g[V], x[V], w[V];
      gs.get(dout + off, k, i, g);
      xs.get(inp + off, k, i, x);
      load_pack(weight, i, w, 1.f);
      for (int j = 0; j < V; ++j) {
        dnorm_sum += g[j] * w[j];
        dnorm_xhat_sum += g[j] * w[j] * (x[j] - m) * r;
      }
    });
    const float dnorm_mean = kCentered ? warp_sum(dnorm_sum) / C : 0.f;
    const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
    lane_packs<P>(lane, packs, [&](int k, int i) {  // the row again: registers, or L1
      float g[V], x[V], w[V], d[V];
      gs.get(dout + off, k, i, g);
      xs.get(inp + off, k, i, x);
      load_pack(weight, i, w, 1.f);
      if (dinp != nullptr) {
        ds.get(dinp + off, k, i, d);
        for (int j = 0; j < V; ++j)
          d[j] += (g[j] * w[j] - dnorm_mean - (x[j] - m) * r * dnorm_xhat_mean) * r;
        store_pack(dinp + off, i, d);
        if constexpr (kColsum)
          for (int j = 0; j < V; ++j) mine[(K - 1) * C + j * packs + i] += d[j];
      }
      if (partials != nullptr)
        for (int j = 0; j < V; ++j) {
          mine[j * packs + i] += g[j] * (x[j] - m) * r;
          if (kCentered) mine[C + j * packs + i] += g[j];
        }
    });
  }
  if (partials == nullptr) return;
  __syncthreads();
  for (int t = threadIdx.y * 32 + lane; t < K * C; t += warps * 32) {
    const int k = t / C, slot = t % C;
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += cols[(static_cast<size_t>(w) * K + k) * C + slot];
    partials[(static_cast<size_t>(k) * gridDim.x + blockIdx.x) * C + (slot % packs) * V + slot / packs] = s;
  }
}

nfn_status check_shape(nfn_ctx* ctx, const char* op, int N, int C) {
  if (N <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d C=%d must be positive", op, N, C);
  return NFN_OK;
}

// The packs a lane keeps in registers for rows of C elements moved as Pack<T> (packed): 1 to
// kMost for bf16 rows (8 elements a pack), else 0 (none: each pass loads again). f32 rows
// (CUDA's precision mode, not its fast one) always stream. The forward holds up to 4 (rows
// of 1,024), the backward, which holds dout, inp and dinp, up to 3 (768: at 4 it spills).
constexpr int kForwardHeld = 4, kBackwardHeld = 3;

template <int kMost, typename T>
int held_packs(bool packed, int C) {
  const int per_lane = (C / Pack<T>::n + 31) / 32;
  return std::is_same_v<T, nfn::cuda::bf16> && packed && per_lane <= kMost ? per_lane : 0;
}

template <int P>
using HeldPacks = std::integral_constant<int, P>;

// Calls launch(HeldPacks<P>{}) with P = held (held_packs<kMost, T>: 0 to kMost) as a constant.
template <int kMost, typename T, typename L>
void with_held_packs(int held, L&& launch) {
  static_assert(kMost >= 3 && kMost <= 4);
  if constexpr (std::is_same_v<T, nfn::cuda::bf16>) {
    switch (held) {
      case 1: launch(HeldPacks<1>{}); return;
      case 2: launch(HeldPacks<2>{}); return;
      case 3: launch(HeldPacks<3>{}); return;
      case 4:
        if constexpr (kMost == 4) launch(HeldPacks<4>{});
        return;
    }
  }
  launch(HeldPacks<0>{});
}

template <bool kCentered, typename T>
nfn_status norm_forward(nfn_ctx* ctx, const char* op, void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int N, int C, float eps) {
  auto* y = static_cast<T*>(out);
  const auto *x = static_cast<const T*>(inp), *w = static_cast<const T*>(weight), *b = static_cast<const T*>(bias);
  const dim3 grid((N + kRowsPerBlock - 1) / kRowsPerBlock), block(32, kRowsPerBlock);
  const bool packed = nfn::cuda::rows_packed<T>(C, {out, inp, weight, bias});
  if (packed)
    with_held_packs<kForwardHeld, T>(held_packs<kForwardHeld, T>(packed, C), [&](auto p) {
      constexpr int V = Pack<T>::n, P = decltype(p)::value;
      nfn::cuda::launch_kernel(ctx, norm_forward_kernel<kCentered, V, P, T>, grid, block, 0, y, mean, rstd, x, w, b,
                               N, C, eps);
    });
  else
    nfn::cuda::launch_kernel(ctx, norm_forward_kernel<kCentered, 1, 0, T>, grid, block, 0, y, mean, rstd, x, w, b, N,
                             C, eps);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

template <bool kCentered, bool kColsum, int V, int P, typename T>
nfn_status launch_backward(nfn_ctx* ctx, const char* op, int blocks, int warps, size_t shared, T* dinp,
                           float* partials, const T* dout, const T* inp, const T* weight, const float* mean,
                           const float* rstd, int N, int C) {
  if (shared > kDefaultShared)
    NFN_CUDA_TRY(ctx, cudaFuncSetAttribute(norm_backward_kernel<kCentered, kColsum, V, P, T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
                 op);
  nfn::cuda::launch_kernel(ctx, norm_backward_kernel<kCentered, kColsum, V, P, T>, blocks, dim3(32, warps), shared,
                           dinp, partials, dout, inp, weight, mean, rstd, N, C);
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

// An SM's shared memory and a block's opt-in limit (228 and 227 KiB on an H200, 100 and 99
// on an RTX 50xx).
struct SharedLimits {
  size_t per_sm = 0, optin = 0;
};
nfn_status shared_limits(nfn_ctx* ctx, const char* op, SharedLimits* out) {
  int optin = 0, sm = 0;
  NFN_CUDA_TRY(ctx, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device), op);
  NFN_CUDA_TRY(ctx, cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, ctx->device), op);
  *out = SharedLimits{static_cast<size_t>(sm), static_cast<size_t>(optin)};
  return NFN_OK;
}

// The shared memory a backward block may take: what `per_sm` of them leave each other on an
// SM, at most a block's opt-in limit, at least the default 48 KiB.
size_t shared_budget(const SharedLimits& lim, int per_sm) {
  const size_t fair = lim.per_sm / per_sm;
  return std::max(kDefaultShared, std::min(lim.optin, fair > kReservedShared ? fair - kReservedShared : 0));
}

// How many blocks of `shared` bytes an SM holds at once, at most `per_sm` (the registers'
// limit), at least 1: where the 48 KiB floor is more than the fair share (an RTX 50xx's 100
// KiB over 4 blocks), fewer than planned, and a grid of sm_count * per_sm would run in waves.
int resident_blocks(const SharedLimits& lim, int per_sm, size_t shared) {
  if (shared == 0) return per_sm;
  return std::clamp(static_cast<int>(lim.per_sm / (shared + kReservedShared)), 1, per_sm);
}

// dinp += the input gradient (the entry points require it; the kernel would skip a NULL
// one); dweight and dbias (NULL: RMSNorm without a weight, and it has no bias) += the
// parameter gradients; with kColsum, dinp_colsum += dinp's column sums.
template <bool kCentered, bool kColsum, typename T>
nfn_status norm_backward(nfn_ctx* ctx, const char* op, void* dinp, void* dweight, void* dbias, void* dinp_colsum,
                         const void* dout, const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C) {
  constexpr int K = kBackwardTerms<kCentered, kColsum>;
  const bool params = kColsum || dweight != nullptr || dbias != nullptr;
  const bool packed = nfn::cuda::rows_packed<T>(C, {dinp, dout, inp, weight});
  const int held = held_packs<kBackwardHeld, T>(packed, C);
  const int per_sm = held > 0 ? kHeldBackwardBlocksPerSm : kBackwardBlocksPerSm;
  // A warp's columns take K * C floats: as many warps (up to kRowsPerBlock) as fit in a
  // block's fair share of an SM's shared memory (one warp at least, opted into).
  SharedLimits lim{};
  if (params) NFN_TRY(shared_limits(ctx, op, &lim));
  const size_t warp_bytes = params ? sizeof(float) * K * C : 0;
  if (warp_bytes > lim.optin)
    return fail(ctx, NFN_ERR_UNSUPPORTED,
                "%s: C=%d: a warp's %d column sums take %zu bytes of shared memory, more than a block may have on "
                "this GPU (%zu)",
                op, C, K, warp_bytes, lim.optin);
  const int warps = params ? static_cast<int>(std::clamp<size_t>(shared_budget(lim, per_sm) / warp_bytes, 1,
                                                                 kRowsPerBlock))
                           : kRowsPerBlock;
  const size_t shared = warp_bytes * warps;
  const int blocks = std::min((N + warps - 1) / warps, ctx->sm_count * resident_blocks(lim, per_sm, shared));
  float* partials = nullptr;
  if (params) {
    void* buf = nullptr;
    NFN_TRY(nfn::cuda::scratch(ctx, sizeof(float) * K * blocks * static_cast<size_t>(C), &buf, op));
    partials = static_cast<float*>(buf);
  }
  auto* di = static_cast<T*>(dinp);
  const auto *g = static_cast<const T*>(dout), *x = static_cast<const T*>(inp), *w = static_cast<const T*>(weight);
  nfn_status s = NFN_OK;
  if (packed)
    with_held_packs<kBackwardHeld, T>(held, [&](auto p) {
      constexpr int V = Pack<T>::n, P = decltype(p)::value;
      s = launch_backward<kCentered, kColsum, V, P>(ctx, op, blocks, warps, shared, di, partials, g, x, w, mean,
                                                     rstd, N, C);
    });
  else
    s = launch_backward<kCentered, kColsum, 1, 0>(ctx, op, blocks, warps, shared, di, partials, g, x, w, mean, rstd,
                                                   N, C);
  NFN_TRY(s);
  if (!params) return NFN_OK;
  nfn::cuda::ColumnDsts<T, K> dsts{{static_cast<T*>(dweight)}};
  if constexpr (kCentered) dsts.p[1] = static_cast<T*>(dbias);
  if constexpr (kColsum) dsts.p[K - 1] = static_cast<T*>(dinp_colsum);
  return nfn::cuda::add_partials(ctx, op, dsts, partials, blocks, C);
}

}  // namespace

extern "C" {

nfn_status nfn_layernorm_forward(nfn_ctx* ctx, void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C,
                                 nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "layernorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr || weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out, inp or weight", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = norm_forward<true, E>(ctx, op, out, mean, rstd, inp, weight, bias, N, C, kLayerNormEps));
  return s;
}

nfn_status nfn_layernorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias,
                                  void* dinp_colsum, const void* dout, const void* inp,
                                  const void* weight, const float* mean, const float* rstd, int N,
                                  int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "layernorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  // Only dbias and dinp_colsum may be NULL (nfn_ops.def), as the CPU library holds it.
  if (dinp == nullptr || dweight == nullptr || dout == nullptr || inp == nullptr || weight == nullptr ||
      mean == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dinp, dweight, dout, inp, weight, mean or rstd", op);
  nfn_status s = NFN_OK;
  if (dinp_colsum != nullptr)
    NFN_DISPATCH(dtype, E,
                 s = norm_backward<true, true, E>(ctx, op, dinp, dweight, dbias, dinp_colsum, dout, inp, weight,
                                                  mean, rstd, N, C));
  else
    NFN_DISPATCH(dtype, E,
                 s = norm_backward<true, false, E>(ctx, op, dinp, dweight, dbias, nullptr, dout, inp, weight, mean,
                                                   rstd, N, C));
  return s;
}

nfn_status nfn_rmsnorm_forward(nfn_ctx* ctx, void* out, float* rstd, const void* inp,
                               const void* weight, int N, int C, float eps, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "rmsnorm_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  const std::string why = nfn::norm::check_eps(op, eps);
  if (!why.empty()) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s", why.c_str());
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = norm_forward<false, E>(ctx, op, out, nullptr, rstd, inp, weight, nullptr, N, C, eps));
  return s;
}

nfn_status nfn_rmsnorm_backward(nfn_ctx* ctx, void* dinp, void* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int N,
                                int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "rmsnorm_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_shape(ctx, op, N, C));
  if (dinp == nullptr || dout == nullptr || inp == nullptr || rstd == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dinp, dout, inp or rstd", op);
  if (dweight != nullptr && weight == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: dweight given but weight is NULL", op);
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E,
               s = norm_backward<false, false, E>(ctx, op, dinp, dweight, nullptr, nullptr, dout, inp, weight, nullptr,
                                                  rstd, N, C));
  return s;
}

}  // extern "C"
