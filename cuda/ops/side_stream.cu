// The context's second stream: side_stream.h.
#include "cuda/ops/side_stream.h"

#include <string>
#include <utility>

#include "cuda/ops/cublaslt.h"

namespace nfn::cuda {

nfn_status side_fork(nfn_ctx* ctx, const char* op, bool* forked) {
  *forked = false;
  if (!ctx->overlap) return NFN_OK;
  if (ctx->side_stream == nullptr) {
    if (ctx->recording) return NFN_OK;  // one stream this time; the next call outside makes it
    // Made whole or not at all: a failure part way (out of memory) releases what was made.
    cudaError_t err = cudaStreamCreateWithFlags(&ctx->side_stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&ctx->side_fork, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&ctx->side_join, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaMalloc(&ctx->side_gemm_workspace, gemm_workspace_bytes());
    if (err != cudaSuccess) {
      side_release(ctx);
      return check(ctx, err, op);
    }
  }
  NFN_CUDA_TRY(ctx, cudaEventRecord(ctx->side_fork, ctx->stream), op);
  NFN_CUDA_TRY(ctx, cudaStreamWaitEvent(ctx->side_stream, ctx->side_fork, 0), op);
  *forked = true;
  return NFN_OK;
}

namespace {

// The side stream's stream, GEMM workspace and scratch take the main ones' places, or back.
void swap_in_side(nfn_ctx* ctx) {
  std::swap(ctx->stream, ctx->side_stream);
  std::swap(ctx->gemm_workspace, ctx->side_gemm_workspace);
  std::swap(ctx->scratch, ctx->side_scratch);
  std::swap(ctx->scratch_bytes, ctx->side_scratch_bytes);
}

}  // namespace

// Only once the context has its GEMM handle: the first GEMM makes it and the main workspace.
void SideSection::enter() {
  if (!open_ || swapped_ || ctx_->cublaslt == nullptr) return;
  swap_in_side(ctx_);
  swapped_ = true;
}

nfn_status SideSection::join(const char* op) {
  if (!open_) return NFN_OK;
  open_ = false;
  if (swapped_) {
    swap_in_side(ctx_);
    swapped_ = false;
  }
  NFN_CUDA_TRY(ctx_, cudaEventRecord(ctx_->side_join, ctx_->side_stream), op);
  NFN_CUDA_TRY(ctx_, cudaStreamWaitEvent(ctx_->stream, ctx_->side_join, 0), op);
  return NFN_OK;
}

SideSection::~SideSection() {
  if (!open_) return;
  const std::string error = ctx_->last_error;  // the op's own failure is the one to report
  (void)join("side stream");
  ctx_->last_error = error;
}

void side_release(nfn_ctx* ctx) {
  if (ctx->side_scratch != nullptr) cudaFreeAsync(ctx->side_scratch, ctx->side_stream);
  if (ctx->side_stream != nullptr) {
    cudaStreamSynchronize(ctx->side_stream);
    cudaStreamDestroy(ctx->side_stream);
  }
  if (ctx->side_fork != nullptr) cudaEventDestroy(ctx->side_fork);
  if (ctx->side_join != nullptr) cudaEventDestroy(ctx->side_join);
  if (ctx->side_gemm_workspace != nullptr) cudaFree(ctx->side_gemm_workspace);
  ctx->side_stream = nullptr;
  ctx->side_fork = ctx->side_join = nullptr;
  ctx->side_gemm_workspace = nullptr;
  ctx->side_scratch = nullptr;
  ctx->side_scratch_bytes = 0;
}

}  // namespace nfn::cuda
