#include "cc/ops/cpu/context.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include <omp.h>

#include "cc/ops/cpu/gemm.h"

nfn_ctx::~nfn_ctx() { nfn::cpu::destroy_gemm_state(gemm); }

namespace nfn::cpu {

nfn_status fail(nfn_ctx* ctx, nfn_status status, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  if (ctx != nullptr) ctx->last_error = buf;
  return status;
}

}  // namespace nfn::cpu

extern "C" {

int nfn_abi_version(void) { return NFN_ABI_VERSION; }

const char* nfn_backend_name(void) { return "cpu"; }

nfn_status nfn_ctx_create(int /*device*/, nfn_ctx** out) {
  if (out == nullptr) return NFN_ERR_INVALID_ARGUMENT;
  *out = new (std::nothrow) nfn_ctx();
  if (*out == nullptr) return NFN_ERR_OUT_OF_MEMORY;
  (*out)->device_name = nfn::cpu::cpu_model_name();
  return NFN_OK;
}

void nfn_ctx_destroy(nfn_ctx* ctx) { delete ctx; }

const char* nfn_ctx_last_error(const nfn_ctx* ctx) {
  return ctx != nullptr ? ctx->last_error.c_str() : "no context";
}

nfn_status nfn_ctx_configure(nfn_ctx* ctx, const char* key, const char* value) {
  if (ctx == nullptr) return NFN_ERR_INVALID_ARGUMENT;
  const std::string k = key ? key : "", v = value ? value : "";
  if (k == "threads") {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > 4096)
      return nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: threads=%s is not a count in 1..4096", v.c_str());
    omp_set_num_threads(static_cast<int>(n));
    return NFN_OK;
  }
  if (k == "matmul") {
    if (v != "f32" && v != "bf16")
      return nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: matmul=%s, expected f32 or bf16", v.c_str());
    if (v == "bf16" && !nfn::cpu::bf16_gemm_supported(ctx))
      return nfn::cpu::fail(ctx, NFN_ERR_UNSUPPORTED, "configure: matmul=bf16 is not supported by oneDNN on this CPU");
    ctx->matmul_bf16 = v == "bf16";
    return NFN_OK;
  }
  if (k == "lm_head_rows") {
    char* end = nullptr;
    const long rows = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || rows < 0 || rows > (1 << 24))
      return nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: lm_head_rows=%s is not a count in 0..16777216",
                            v.c_str());
    ctx->lm_head_rows = static_cast<int>(rows);
    return NFN_OK;
  }
  if (k == "deterministic") {  // accepted either way: every CPU kernel repeats bit for bit
    if (v != "on" && v != "off")
      return nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: deterministic=%s is not on or off", v.c_str());
    return NFN_OK;
  }
  return nfn::cpu::fail(ctx, NFN_ERR_INVALID_ARGUMENT, "configure: unknown option %s", k.c_str());
}

// CPU ops complete before they return.
nfn_status nfn_synchronize(nfn_ctx* ctx) {
  return ctx != nullptr ? NFN_OK : NFN_ERR_INVALID_ARGUMENT;
}

}  // extern "C"
