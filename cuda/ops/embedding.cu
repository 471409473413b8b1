// Token + position embedding. The backward sorts token ids (CUB radix sort) so that each
// distinct token's rows are summed once in f32 and added to dwte without atomics: the
// result is deterministic and bf16 gradients are rounded once, not once per occurrence.
// A warp sums each run of a token's rows that lies within an aligned block of 32 sorted
// positions (a segment), four rows at a time, so a frequent token (" the" is about 4% of web
// text, ~650 rows of a 16k-token micro-batch) is summed by ~20 warps at once, and a second
// kernel adds its segments' sums in order; a micro-batch's other tokens, one segment each,
// need one warp each, not a block of 8.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;
using nfn::cuda::to_f32;

namespace {

constexpr int kRowsPerBlock = 8;  // embedding_forward: a warp a row

// out[row] = wte[token] + wpe[t] (wpe NULL: no position term), V elements a load.
template <int V, typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int N, int T_,
                                         int C) {
  nfn::cuda::pdl_begin();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  T* y = out + static_cast<size_t>(row) * C;
  if (tokens[row] < 0) {  // no row of wte: NaN, so that the loss shows it (the ids are not read on the host)
    for (int i = threadIdx.x; i < C / V; i += 32) {
      float a[V];
      for (int j = 0; j < V; ++j) a[j] = NAN;
      store_pack(y, i, a);
    }
    return;
  }
  const T* w = wte + static_cast<size_t>(tokens[row]) * C;
  const T* p = wpe != nullptr ? wpe + static_cast<size_t>(row % T_) * C : nullptr;
  for (int i = threadIdx.x; i < C / V; i += 32) {
    float a[V], b[V];
    load_pack(w, i, a);
    load_pack(p, i, b);
    for (int j = 0; j < V; ++j) a[j] += b[j];
    store_pack(y, i, a);
  }
}

template <int V, typename T>
void launch_forward(nfn_ctx* ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int N, int T_, int C) {
  nfn::cuda::launch_kernel(ctx, embedding_forward_kernel<V, T>, (N + kRowsPerBlock - 1) / kRowsPerBlock,
                           dim3(32, kRowsPerBlock), 0, out, tokens, wte, wpe, N, T_, C);
}

constexpr int kDwteWarps = 8, kDwteUnroll = 4;
// Sorted positions are cut into aligned blocks of kSegmentRows; a segment is a token's rows
// within one such block, so no warp sums more than kSegmentRows rows.
constexpr int kSegmentRows = 32;

// A warp per sorted position p and 32 * V columns; it works where a segment starts (its
// token's run starts at p, or p starts an aligned block inside a run) and sums the segment's
// rows in f32, four at a time. A run that is one segment (almost every run of a micro-batch)
// is added to its token's dwte row at once, rounded once. A longer run leaves its segments'
// sums in `partials`, two rows of C floats an aligned block: [2b] the block's first segment
// where it continues a run, [2b + 1] the segment of the run that starts in block b and goes
// on past it; embedding_dwte_runs_kernel adds those up.
template <int V, typename T>
__global__ void embedding_dwte_kernel(T* dwte, float* partials, const T* dout, const int32_t* sorted_tokens,
                                      const int32_t* sorted_rows, int N, int C) {
  nfn::cuda::pdl_begin();
  const int p = blockIdx.x * kDwteWarps + threadIdx.y, lane = threadIdx.x;
  if (p >= N) return;
  const int32_t token = sorted_tokens[p];
  if (token < 0) return;  // no row of dwte to add to (the forward gave that position NaN)
  const bool run_start = p == 0 || sorted_tokens[p - 1] != token;
  if (!run_start && p % kSegmentRows != 0) return;
  const int end = min(N, (p / kSegmentRows + 1) * kSegmentRows);  // the aligned block's
  const int pack = blockIdx.y * 32 + lane;                         // this lane's V columns
  const bool mine = pack * V < C;
  float acc[V] = {};
  for (int q0 = p; q0 < end; q0 += kDwteUnroll) {
    int32_t rows[kDwteUnroll];  // each step's loads issued together
    for (int u = 0; u < kDwteUnroll; ++u) {
      const int q = q0 + u;
      rows[u] = q < end && sorted_tokens[q] == token ? sorted_rows[q] : -1;
    }
    float v[kDwteUnroll][V];
    for (int u = 0; u < kDwteUnroll; ++u) {
      if (rows[u] >= 0 && mine)
        load_pack(dout + static_cast<size_t>(rows[u]) * C, pack, v[u]);
      else
        for (int j = 0; j < V; ++j) v[u][j] = 0.f;
    }
    for (int u = 0; u < kDwteUnroll; ++u)
      for (int j = 0; j < V; ++j) acc[j] += v[u][j];
    if (rows[kDwteUnroll - 1] < 0) break;  // sorted: the segment ended
  }
  if (!mine) return;
  const bool goes_on = end < N && sorted_tokens[end] == token;
  if (run_start && !goes_on) {
    T* row = dwte + static_cast<size_t>(token) * C;
    float old[V];
    load_pack(row, pack, old);
    for (int j = 0; j < V; ++j) acc[j] += old[j];
    store_pack(row, pack, acc);
    return;
  }
  store_pack(partials + static_cast<size_t>(2 * (p / kSegmentRows) + (run_start ? 1 : 0)) * C, pack, acc);
}

// A warp per aligned block b and 32 * V columns: where a run starts in block b and goes on
// past it, adds its segments' sums in order (partials [2b + 1], then [2c] for each later block
// c the run continues into) to its token's dwte row, rounded once.
template <int V, typename T>
__global__ void embedding_dwte_runs_kernel(T* dwte, const float* partials, const int32_t* sorted_tokens, int N,
                                           int C) {
  nfn::cuda::pdl_begin();
  const int b = blockIdx.x * kDwteWarps + threadIdx.y, lane = threadIdx.x;
  const int first = b * kSegmentRows, end = first + kSegmentRows;
  if (end >= N) return;
  const int32_t token = sorted_tokens[end - 1];
  if (token < 0 || sorted_tokens[end] != token) return;  // no dwte row, or no run crosses the block's end
  if (sorted_tokens[first] == token && first > 0 && sorted_tokens[first - 1] == token) return;  // began before b
  const int pack = blockIdx.y * 32 + lane;
  if (pack * V >= C) return;
  float acc[V];
  load_pack(partials + (2 * static_cast<size_t>(b) + 1) * C, pack, acc);
  for (int c = b + 1; c * kSegmentRows < N && sorted_tokens[c * kSegmentRows] == token; ++c) {
    float v[V];
    load_pack(partials + 2 * static_cast<size_t>(c) * C, pack, v);
    for (int j = 0; j < V; ++j) acc[j] += v[j];
  }
  T* row = dwte + static_cast<size_t>(token) * C;
  float old[V];
  load_pack(row, pack, old);
  for (int j = 0; j < V; ++j) acc[j] += old[j];
  store_pack(row, pack, acc);
}

template <int V, typename T>
void launch_dwte(nfn_ctx* ctx, T* dwte, float* partials, const T* dout, const int32_t* sorted_tokens,
                 const int32_t* sorted_rows, int N, int C) {
  const int groups = (C + 32 * V - 1) / (32 * V), blocks = (N + kSegmentRows - 1) / kSegmentRows;
  const dim3 block(32, kDwteWarps);
  nfn::cuda::launch_kernel(ctx, embedding_dwte_kernel<V, T>, dim3((N + kDwteWarps - 1) / kDwteWarps, groups), block,
                           0, dwte, partials, dout, sorted_tokens, sorted_rows, N, C);
  nfn::cuda::launch_kernel(ctx, embedding_dwte_runs_kernel<V, T>,
                           dim3((blocks + kDwteWarps - 1) / kDwteWarps, groups), block, 0, dwte, partials,
                           sorted_tokens, N, C);
}

template <typename T>
__global__ void embedding_dwpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
  nfn::cuda::pdl_begin();
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T_) * C) return;
  float sum = 0.f;
  for (int b = 0; b < B; ++b) sum += to_f32(dout[static_cast<size_t>(b) * T_ * C + i]);
  dwpe[i] = from_f32<T>(to_f32(dwpe[i]) + sum);
}

__global__ void iota_kernel(int32_t* out, int n) {
  nfn::cuda::pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

}  // namespace

extern "C" {

nfn_status nfn_embedding_forward(nfn_ctx* ctx, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "embedding_forward");
  if (B <= 0 || T <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "embedding_forward: B=%d T=%d C=%d must be positive", B, T, C);
  if (out == nullptr || tokens == nullptr || wte == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "embedding_forward: null out, tokens or wte");
  if (static_cast<int64_t>(B) * T > INT32_MAX)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "embedding_forward: B*T=%lld rows is too many",
                static_cast<long long>(B) * T);
  NFN_DISPATCH(dtype, E, {
    auto* y = static_cast<E*>(out);
    const auto *w = static_cast<const E*>(wte), *p = static_cast<const E*>(wpe);
    if (nfn::cuda::rows_packed<E>(C, {out, wte, wpe}))
      launch_forward<Pack<E>::n>(ctx, y, tokens, w, p, B * T, T, C);
    else
      launch_forward<1>(ctx, y, tokens, w, p, B * T, T, C);
  });
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "embedding_forward");
  return NFN_OK;
}

nfn_status nfn_embedding_backward(nfn_ctx* ctx, void* dwte, void* dwpe, const void* dout,
                                  const int32_t* tokens, int B, int T, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "embedding_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (B <= 0 || T <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B=%d T=%d C=%d must be positive", op, B, T, C);
  if (dout == nullptr || tokens == nullptr || (dwte == nullptr && dwpe == nullptr))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dout or tokens, or no gradient to write", op);
  if (static_cast<int64_t>(B) * T > (1 << 30))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: B*T=%lld rows is too many", op,
                static_cast<long long>(B) * T);
  const int N = B * T;
  if (dwpe != nullptr) {
    const size_t n = static_cast<size_t>(T) * C;
    NFN_DISPATCH(dtype, E, nfn::cuda::launch_kernel(ctx, embedding_dwpe_kernel<E>, (n + 255) / 256, 256, 0,
                                                    static_cast<E*>(dwpe), static_cast<const E*>(dout), B, T, C));
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  }
  if (dwte == nullptr) return NFN_OK;
  // scratch: rows, sorted tokens, sorted rows, then CUB's temporary storage
  size_t temp_bytes = 0;
  NFN_CUDA_TRY(ctx, cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens,
                                                    static_cast<int32_t*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), N, 0, 32,
                                                    ctx->stream), op);
  const size_t ids_bytes = (static_cast<size_t>(N) * 4 + 255) / 256 * 256;
  // two rows of C floats for each aligned block of kSegmentRows sorted positions
  const size_t partial_bytes = ((N + kSegmentRows - 1) / kSegmentRows * 2 * static_cast<size_t>(C) * 4 + 255) / 256 * 256;
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, 3 * ids_bytes + partial_bytes + temp_bytes, &buf, op));
  char* base = static_cast<char*>(buf);
  auto* rows = reinterpret_cast<int32_t*>(base);
  auto* sorted_tokens = reinterpret_cast<int32_t*>(base + ids_bytes);
  auto* sorted_rows = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  auto* partials = reinterpret_cast<float*>(base + 3 * ids_bytes);
  nfn::cuda::launch_kernel(ctx, iota_kernel, (N + 255) / 256, 256, 0, rows, N);
  NFN_CUDA_TRY(ctx, cub::DeviceRadixSort::SortPairs(base + 3 * ids_bytes + partial_bytes, temp_bytes, tokens,
                                                    sorted_tokens, rows, sorted_rows, N, 0, 32,
                                                    ctx->stream), op);
  NFN_DISPATCH(dtype, E, {
    auto* dst = static_cast<E*>(dwte);
    const auto* grad = static_cast<const E*>(dout);
    if (nfn::cuda::rows_packed<E>(C, {dwte, dout}))
      launch_dwte<Pack<E>::n>(ctx, dst, partials, grad, sorted_tokens, sorted_rows, N, C);
    else
      launch_dwte<1>(ctx, dst, partials, grad, sorted_tokens, sorted_rows, N, C);
  });
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // extern "C"
