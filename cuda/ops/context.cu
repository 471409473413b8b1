#include <cstdarg>
#include <cstdio>
#include <new>

#include "cuda/ops/context.h"

namespace nfn::cuda {

nfn_status fail(nfn_ctx* ctx, nfn_status status, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  if (ctx != nullptr) ctx->last_error = buf;
  return status;
}

nfn_status check(nfn_ctx* ctx, cudaError_t err, const char* op) {
  if (err == cudaSuccess) return NFN_OK;
  nfn_status status = err == cudaErrorMemoryAllocation ? NFN_ERR_OUT_OF_MEMORY : NFN_ERR_BACKEND;
  return fail(ctx, status, "%s: %s", op, cudaGetErrorString(err));
}

}  // namespace nfn::cuda

namespace {
// ctx_create cannot report through a context it failed to make; keep its reason here.
thread_local std::string create_error;
}  // namespace

using nfn::cuda::fail;

extern "C" {

int nfn_abi_version(void) { return NFN_ABI_VERSION; }

const char* nfn_backend_name(void) { return "cuda"; }

nfn_status nfn_ctx_create(int device, nfn_ctx** out) {
  if (out == nullptr) return NFN_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    create_error = std::string("no CUDA device: ") +
                   (err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return NFN_ERR_BACKEND;
  }
  if (device < 0 || device >= count) {
    create_error = "CUDA device " + std::to_string(device) + " does not exist (" +
                   std::to_string(count) + " found)";
    return NFN_ERR_INVALID_ARGUMENT;
  }
  auto* ctx = new (std::nothrow) nfn_ctx();
  if (ctx == nullptr) return NFN_ERR_OUT_OF_MEMORY;
  ctx->device = device;
  err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    create_error = std::string("CUDA context: ") + cudaGetErrorString(err);
    delete ctx;
    return NFN_ERR_BACKEND;
  }
  *out = ctx;
  return NFN_OK;
}

void nfn_ctx_destroy(nfn_ctx* ctx) {
  if (ctx == nullptr) return;
  if (ctx->stream != nullptr) cudaStreamDestroy(ctx->stream);
  delete ctx;
}

const char* nfn_ctx_last_error(const nfn_ctx* ctx) {
  return ctx != nullptr ? ctx->last_error.c_str() : create_error.c_str();
}

nfn_status nfn_ctx_configure(nfn_ctx* ctx, const char* key, const char* value) {
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: the CUDA backend has no option %s=%s",
              key ? key : "(null)", value ? value : "(null)");
}

nfn_status nfn_synchronize(nfn_ctx* ctx) {
  NFN_CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream), "synchronize");
  return NFN_OK;
}

}  // extern "C"
