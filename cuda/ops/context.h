// The CUDA backend's context and the helpers every CUDA op shares.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

// Which attention kernels attention_forward/backward run (ctx option "attention"):
// flash_simt (CUDA cores, every dtype and head size up to 128), flash_mma (tensor cores for
// bf16 with a head size in 16s up to 128, flash_simt for the rest), cudnn (cuDNN's SDPA for
// bf16 with a head size that is a multiple of 8 up to 128, flash_simt for the rest),
// thunderkittens (nfn's wgmma kernels on ThunderKittens, cuda/tk, where they were built, for
// bf16 with head size 64 or 128 and T a multiple of 64; flash_simt for the rest). cudnn and
// thunderkittens send grouped-query heads and sliding windows to flash_mma where it applies.
enum class nfn_attention_path { flash_simt, flash_mma, cudnn, thunderkittens };

struct nfn_ctx {
  int device = 0;
  std::string device_name;          // cudaDeviceProp::name, for reports
  int cc_major = 0;                 // compute capability's major version
  int sm_count = 132;               // multiprocessors (cudaDeviceProp; 132, an H200's, if it says none)
  cudaStream_t stream = nullptr;
  std::string last_error;
  void* cublaslt = nullptr;         // cublasLtHandle_t, created on first GEMM
  void* gemm_workspace = nullptr;   // cuBLASLt workspace (kGemmWorkspaceBytes)
  void* gemm_algos = nullptr;       // cuBLASLt's kernel for each GEMM shape seen (cublaslt.cc)
  // Option gemm_tune=on: a shape's first GEMM times cuBLASLt's first picks and keeps the
  // fastest (cublaslt.cc), and the picks are kept in a file (tuned_picks.h) that later runs on
  // this device take them from, so they repeat. Off by default until a GPU has run the file.
  bool gemm_tune = false;
  // Option gemm_tune_cache: the picks file ("": tuned_picks.h's default_picks_path; "off":
  // none, every run times again). tuned_picks: its TunedPicks, read on the first tuned GEMM.
  std::string gemm_tune_cache;
  void* tuned_picks = nullptr;
  unsigned gemm_timed = 0, gemm_kept = 0;  // shapes gemm_tune timed; shapes it took from the file
  // Option deterministic=off: cuDNN's attention backward may add dQ with atomics (its faster
  // form), so runs no longer repeat bit for bit. On by default: every kernel repeats exactly.
  bool deterministic = true;
  // Option overlap=on: linear_backward runs the weight and bias gradients on a second stream,
  // beside the input gradient, and joins it before returning (side_stream.h). Off by default
  // until a GPU has measured it. The stream, its events and its own cuBLASLt workspace are
  // made on first use (outside a graph recording); its scratch on its first scratch use.
  bool overlap = false;
  // Option pdl=on: every kernel of the library is a programmatic dependent launch
  // (launch.h), so its blocks may start while the kernel before it finishes and wait for its
  // writes there. Off by default until a GPU has measured it; the results are the same.
  bool pdl = false;
  cudaStream_t side_stream = nullptr;
  cudaEvent_t side_fork = nullptr, side_join = nullptr;
  void* side_gemm_workspace = nullptr;
  void* side_scratch = nullptr;     // the side stream's scratch (swapped in as `scratch`)
  size_t side_scratch_bytes = 0;
  void* cudnn = nullptr;            // cuDNN handle and graphs (attention_cudnn.cc), on first use
  void* scratch = nullptr;          // stream-ordered scratch, grown on demand
  size_t scratch_bytes = 0;
  bool recording = false;           // between graph_begin and graph_end (graph.cu)
  int graphs = 0;                   // graphs alive: they hold the scratch pointers they saw
  std::vector<void*> retired_scratch;  // outgrown while graphs were alive; freed with them
  unsigned* blocks_done = nullptr;  // sum_squares_many's count of finished blocks, 0 between calls
  // linear_*'s fused cuBLASLt epilogues (by GemmEpilogue): calls that ran fused, and calls
  // that ran the unfused form instead (linear.cu; nfn_ctx_query's fused_epilogues).
  unsigned long long epilogue_calls[8][2] = {};
  // Unless configured: cudnn where cuDNN loads (measured about twice flash_mma's speed at
  // GPT-2 124M on an H200, docs/performance.md), else flash_mma (nfn_ctx_create).
  nfn_attention_path attention = nfn_attention_path::flash_mma;
  bool attention_configured = false;  // set by configure(attention=...): no fallback then
  // Where the default cudnn gave way to flash_mma: the report's name for the path, with why.
  std::string attention_fallback;
  mutable std::string query_answer;  // nfn_ctx_query's last answer, built on the call (query.cu)
  int lm_head_rows = 0;  // rows per lm_head_cross_entropy chunk; 0 picks by vocab size
};

namespace nfn::cuda {

nfn_status fail(nfn_ctx* ctx, nfn_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Turns a CUDA error into a status with "<op>: <cuda message>" on the context.
nfn_status check(nfn_ctx* ctx, cudaError_t err, const char* op);

// A scratch buffer of at least `bytes`, valid until the next call on this context. Grown
// with stream-ordered allocations, so earlier kernels that still use the old one are safe;
// an outgrown buffer lives on while any graph (which may use it) does. Growing inside a
// recording fails: a graph must not allocate.
nfn_status scratch(nfn_ctx* ctx, size_t bytes, void** out, const char* op);

// Fails, naming `what`, inside a graph recording: for the calls a graph cannot hold
// (allocating, freeing, synchronizing, copying host memory).
nfn_status not_recording(nfn_ctx* ctx, const char* what);

inline unsigned grid_for(size_t n, unsigned block) {
  size_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65535u * 16u ? blocks : 65535u * 16u);
}

inline size_t dtype_size(nfn_dtype dtype) { return dtype == NFN_BF16 ? 2 : 4; }

}  // namespace nfn::cuda

#define NFN_CUDA_TRY(ctx, expr, op)                                   \
  do {                                                                \
    nfn_status nfn_status_ = nfn::cuda::check((ctx), (expr), (op));   \
    if (nfn_status_ != NFN_OK) return nfn_status_;                    \
  } while (0)

#define NFN_TRY(expr)                           \
  do {                                          \
    nfn_status nfn_status_ = (expr);            \
    if (nfn_status_ != NFN_OK) return nfn_status_; \
  } while (0)

// A null context is refused before anything reads it (there is nowhere to put a message).
#define NFN_CHECK_CTX(ctx)                                 \
  do {                                                     \
    if ((ctx) == nullptr) return NFN_ERR_INVALID_ARGUMENT; \
  } while (0)

// Rejects a dtype other than f32/bf16 with "<op>: unknown dtype N".
#define NFN_CHECK_DTYPE(ctx, dtype, op)                                                   \
  do {                                                                                    \
    if ((dtype) != NFN_F32 && (dtype) != NFN_BF16)                                        \
      return nfn::cuda::fail((ctx), NFN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", (op), \
                             static_cast<int>(dtype));                                    \
  } while (0)
