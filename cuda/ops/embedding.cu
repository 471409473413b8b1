// Token + position embedding. The backward sorts token ids (CUB radix sort) so that each
// distinct token's rows are summed once in f32 and added to dwte without atomics: the
// result is deterministic and bf16 gradients are rounded once, not once per occurrence.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"

using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::to_f32;

namespace {

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int T_, int C, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(row % T_);
    float v = to_f32(wte[static_cast<size_t>(tokens[row]) * C + c]);
    if (wpe != nullptr) v += to_f32(wpe[static_cast<size_t>(t) * C + c]);
    out[i] = from_f32<T>(v);
  }
}

// One block column per sorted position; the first position of each run of equal tokens sums
// the run's dout rows (in original order) and adds them to that token's dwte row.
template <typename T>
__global__ void embedding_dwte_kernel(T* dwte, const T* dout, const int32_t* sorted_tokens,
                                      const int32_t* sorted_rows, int N, int C) {
  const int p = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int32_t token = sorted_tokens[p];
  if (c >= C || (p > 0 && sorted_tokens[p - 1] == token)) return;
  float sum = 0.f;
  for (int q = p; q < N && sorted_tokens[q] == token; ++q)
    sum += to_f32(dout[static_cast<size_t>(sorted_rows[q]) * C + c]);
  T* dst = dwte + static_cast<size_t>(token) * C + c;
  *dst = from_f32<T>(to_f32(*dst) + sum);
}

template <typename T>
__global__ void embedding_dwpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T_) * C) return;
  float sum = 0.f;
  for (int b = 0; b < B; ++b) sum += to_f32(dout[static_cast<size_t>(b) * T_ * C + i]);
  dwpe[i] = from_f32<T>(to_f32(dwpe[i]) + sum);
}

__global__ void iota_kernel(int32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

}  // namespace

extern "C" {

nfn_status nfn_embedding_forward(nfn_ctx* ctx, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, nfn_dtype dtype) {
  NFN_CHECK_DTYPE(ctx, dtype, "embedding_forward");
  if (B <= 0 || T <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "embedding_forward: B=%d T=%d C=%d must be positive", B, T, C);
  if (out == nullptr || tokens == nullptr || wte == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "embedding_forward: null out, tokens or wte");
  const size_t total = static_cast<size_t>(B) * T * C;
  const unsigned block = 256, grid = nfn::cuda::grid_for(total, block);
  NFN_DISPATCH(dtype, E, embedding_forward_kernel<<<grid, block, 0, ctx->stream>>>(
                             static_cast<E*>(out), tokens, static_cast<const E*>(wte),
                             static_cast<const E*>(wpe), T, C, total));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "embedding_forward");
  return NFN_OK;
}

nfn_status nfn_embedding_backward(nfn_ctx* ctx, void* dwte, void* dwpe, const void* dout,
                                  const int32_t* tokens, int B, int T, int C, nfn_dtype dtype) {
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
    NFN_DISPATCH(dtype, E, embedding_dwpe_kernel<<<(n + 255) / 256, 256, 0, ctx->stream>>>(
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
  void* buf = nullptr;
  NFN_TRY(nfn::cuda::scratch(ctx, 3 * ids_bytes + temp_bytes, &buf, op));
  char* base = static_cast<char*>(buf);
  auto* rows = reinterpret_cast<int32_t*>(base);
  auto* sorted_tokens = reinterpret_cast<int32_t*>(base + ids_bytes);
  auto* sorted_rows = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  iota_kernel<<<(N + 255) / 256, 256, 0, ctx->stream>>>(rows, N);
  NFN_CUDA_TRY(ctx, cub::DeviceRadixSort::SortPairs(base + 3 * ids_bytes, temp_bytes, tokens,
                                                    sorted_tokens, rows, sorted_rows, N, 0, 32,
                                                    ctx->stream), op);
  dim3 grid(N, (C + 127) / 128);
  NFN_DISPATCH(dtype, E, embedding_dwte_kernel<<<grid, 128, 0, ctx->stream>>>(
                             static_cast<E*>(dwte), static_cast<const E*>(dout), sorted_tokens,
                             sorted_rows, N, C));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

}  // extern "C"
