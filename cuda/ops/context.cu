#include <cstdarg>
#include <cstdio>
#include <new>
#include <utility>

#include <cstdlib>
#include <cstring>

#include "cuda/ops/attention_cudnn.h"
#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/launch.h"
#include "cuda/ops/side_stream.h"
#include "cuda/ops/tuned_picks.h"
#include "cuda/tk/bridge.h"

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
  // The runtime keeps a failed call's error for the next cudaGetLastError: clear it, or the
  // next op's launch check would report it as its own.
  (void)cudaGetLastError();
  nfn_status status = err == cudaErrorMemoryAllocation ? NFN_ERR_OUT_OF_MEMORY : NFN_ERR_BACKEND;
  return fail(ctx, status, "%s: %s", op, cudaGetErrorString(err));
}

nfn_status not_recording(nfn_ctx* ctx, const char* what) {
  if (!ctx->recording) return NFN_OK;
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: not allowed inside a graph recording", what);
}

nfn_status scratch(nfn_ctx* ctx, size_t bytes, void** out, const char* op) {
  if (bytes > ctx->scratch_bytes) {
    if (ctx->recording)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                  "%s: scratch would grow from %zu to %zu bytes inside a graph recording; issue the "
                  "same ops once before recording them",
                  op, ctx->scratch_bytes, bytes);
    if (ctx->scratch != nullptr && ctx->graphs > 0)
      ctx->retired_scratch.push_back(ctx->scratch);
    else if (ctx->scratch != nullptr)
      NFN_CUDA_TRY(ctx, cudaFreeAsync(ctx->scratch, ctx->stream), op);
    ctx->scratch = nullptr;
    ctx->scratch_bytes = 0;
    NFN_CUDA_TRY(ctx, cudaMallocAsync(&ctx->scratch, bytes, ctx->stream), op);
    ctx->scratch_bytes = bytes;
  }
  *out = ctx->scratch;
  return NFN_OK;
}

}  // namespace nfn::cuda

namespace {
// ctx_create cannot report through a context it failed to make; keep its reason here.
thread_local std::string create_error;

// The PTX architecture the driver loaded this library's kernels from: 90 or 120 where it took
// the sm_90a or sm_120 machine code, 80 where it compiled the compute_80 PTX at load (another
// GPU, or CUDA_FORCE_PTX_JIT=1), 0 where it does not say.
#ifdef NFN_CUDA_EMULATION
int loaded_ptx_version() { return 90; }
#else
__global__ void ptx_probe_kernel() { nfn::cuda::pdl_begin(); }
int loaded_ptx_version() {
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, ptx_probe_kernel) == cudaSuccess) return attr.ptxVersion;
  (void)cudaGetLastError();
  return 0;
}
#endif

// Why cudaGetDeviceCount found no device, in a user's terms: the runtime says "driver version
// is insufficient" both where no driver is installed at all and where it is too old.
std::string no_device_reason(cudaError_t err) {
  if (err == cudaSuccess) return "device count is 0";
  int driver = 0, runtime = 0;
  if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
      cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    if (driver == 0) return "no NVIDIA driver is installed (libcuda.so.1 does not load)";
    return "the NVIDIA driver supports CUDA " + version(driver) + ", older than this library's runtime (CUDA " +
           version(runtime) + "): update the driver";
  }
  return cudaGetErrorString(err);
}
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
    create_error = "no CUDA device: " + no_device_reason(err);
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
  cudaDeviceProp prop;
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, device);
  if (err == cudaSuccess) ctx->device_name = prop.name, ctx->cc_major = prop.major;
  if (err == cudaSuccess && prop.multiProcessorCount > 0) ctx->sm_count = prop.multiProcessorCount;
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaMalloc(reinterpret_cast<void**>(&ctx->blocks_done), sizeof(unsigned));
  if (err == cudaSuccess) err = cudaMemsetAsync(ctx->blocks_done, 0, sizeof(unsigned), ctx->stream);
  if (err != cudaSuccess) {
    create_error = std::string("CUDA context: ") + cudaGetErrorString(err);
    if (ctx->blocks_done != nullptr) cudaFree(ctx->blocks_done);
    if (ctx->stream != nullptr) cudaStreamDestroy(ctx->stream);
    delete ctx;
    return NFN_ERR_BACKEND;
  }
  if (nfn::cuda::cudnn_unavailable_reason() == nullptr) ctx->attention = nfn_attention_path::cudnn;
  *out = ctx;
  return NFN_OK;
}

void nfn_ctx_destroy(nfn_ctx* ctx) {
  if (ctx == nullptr) return;
  if (ctx->recording) {  // a recording left open: end it, keep nothing
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(ctx->stream, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  // Work still queued may use the cuDNN plans and the GEMM workspace: finish it first.
  if (ctx->stream != nullptr) cudaStreamSynchronize(ctx->stream);
  nfn::cuda::side_release(ctx);
  nfn::cuda::gemm_release(ctx);
  nfn::cuda::cudnn_release(ctx);
  if (ctx->scratch != nullptr) cudaFreeAsync(ctx->scratch, ctx->stream);
  for (void* p : ctx->retired_scratch) cudaFreeAsync(p, ctx->stream);
  if (ctx->stream != nullptr) {
    cudaStreamSynchronize(ctx->stream);
    cudaStreamDestroy(ctx->stream);
  }
  if (ctx->blocks_done != nullptr) cudaFree(ctx->blocks_done);
  delete ctx;
}

const char* nfn_ctx_last_error(const nfn_ctx* ctx) {
  return ctx != nullptr ? ctx->last_error.c_str() : create_error.c_str();
}

// Options: attention=flash|flash_mma|cudnn|thunderkittens (the kernels behind attention_forward/backward);
// lm_head_rows=N (rows per LM-head chunk, a multiple of 8; 0 = by vocab size); gemm_tune=on|off;
// gemm_tune_cache=PATH|off (where gemm_tune keeps its picks); deterministic=on|off; overlap=on|off;
// pdl=on|off.
nfn_status nfn_ctx_configure(nfn_ctx* ctx, const char* key, const char* value) {
  if (ctx == nullptr) return NFN_ERR_INVALID_ARGUMENT;
  if (key != nullptr && value != nullptr && std::strcmp(key, "lm_head_rows") == 0) {
    char* end = nullptr;
    const long rows = std::strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || rows < 0 || rows % 8 != 0 || rows > (1 << 24))
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                  "configure: lm_head_rows=%s is not a multiple of 8 in 0..16777216", value);
    ctx->lm_head_rows = static_cast<int>(rows);
    return NFN_OK;
  }
  if (key != nullptr && value != nullptr && std::strcmp(key, "gemm_tune_cache") == 0) {
    if (*value == '\0')
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: gemm_tune_cache needs a file path or off");
    if (ctx->tuned_picks != nullptr)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                  "configure: gemm_tune_cache=%s: this context already read its picks file", value);
    ctx->gemm_tune_cache = value;
    return NFN_OK;
  }
  for (auto [name, flag] : {std::pair{"gemm_tune", &ctx->gemm_tune}, std::pair{"deterministic", &ctx->deterministic},
                            std::pair{"overlap", &ctx->overlap}, std::pair{"pdl", &ctx->pdl}}) {
    if (key == nullptr || value == nullptr || std::strcmp(key, name) != 0) continue;
    if (std::strcmp(value, "on") != 0 && std::strcmp(value, "off") != 0)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: %s=%s is not on or off", name, value);
    // The kernels wait for their predecessor (griddepcontrol.wait) only in the sm_90a and
    // sm_120 code; another GPU, or one made to compile PTX at load, runs them from compute_80
    // PTX, where pdl_begin is empty.
    if (flag == &ctx->pdl && std::strcmp(value, "on") == 0) {
      const int ptx = loaded_ptx_version();
      if ((ctx->cc_major != 9 && ctx->cc_major != 12) || (ptx > 0 && ptx < 90))
        return fail(ctx, NFN_ERR_UNSUPPORTED,
                    "configure: pdl=on: %s (compute capability %d) runs this library's kernels from compute_80 "
                    "PTX, which cannot wait for the kernel before; only the sm_90a and sm_120 builds can",
                    ctx->device_name.c_str(), ctx->cc_major);
    }
    *flag = std::strcmp(value, "on") == 0;
    return NFN_OK;
  }
  if (key != nullptr && value != nullptr && std::strcmp(key, "attention") == 0) {
    nfn_attention_path path;
    if (std::strcmp(value, "flash") == 0) {
      path = nfn_attention_path::flash_simt;
    } else if (std::strcmp(value, "flash_mma") == 0) {
      path = nfn_attention_path::flash_mma;
    } else if (std::strcmp(value, "cudnn") == 0) {
      if (const char* why = nfn::cuda::cudnn_unavailable_reason())
        return fail(ctx, NFN_ERR_UNSUPPORTED, "configure: attention=cudnn: %s", why);
      path = nfn_attention_path::cudnn;
    } else if (std::strcmp(value, "thunderkittens") == 0) {
      if (const char* why = nfn_tk_unavailable_reason())
        return fail(ctx, NFN_ERR_UNSUPPORTED, "configure: attention=thunderkittens: %s", why);
      path = nfn_attention_path::thunderkittens;
    } else {
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                  "configure: attention=%s is not one of flash, flash_mma, cudnn, thunderkittens", value);
    }
    ctx->attention = path;
    ctx->attention_configured = true;
    ctx->attention_fallback.clear();  // a fallback's note was about the path before
    return NFN_OK;
  }
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: the CUDA backend has no option %s=%s",
              key ? key : "(null)", value ? value : "(null)");
}

nfn_status nfn_synchronize(nfn_ctx* ctx) {
  NFN_CHECK_CTX(ctx);
  NFN_TRY(nfn::cuda::not_recording(ctx, "synchronize"));
  NFN_CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream), "synchronize");
  return NFN_OK;
}

}  // extern "C"
