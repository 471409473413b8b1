// Memory ops on the CPU: host memory, 64-byte aligned for vector loads.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

extern "C" {

namespace {

nfn_status aligned(nfn_ctx* ctx, size_t bytes, void** out, const char* op) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null output pointer", op);
  *out = nullptr;
  if (bytes > SIZE_MAX - 63)  // rounding up would wrap to a tiny block
    return fail(ctx, NFN_ERR_OUT_OF_MEMORY, "%s: %zu bytes failed", op, bytes);
  size_t rounded = (bytes + 63) / 64 * 64;
  *out = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (*out == nullptr) return fail(ctx, NFN_ERR_OUT_OF_MEMORY, "%s: %zu bytes failed", op, bytes);
  return NFN_OK;
}

}  // namespace

nfn_status nfn_alloc(nfn_ctx* ctx, size_t bytes, void** out) { return aligned(ctx, bytes, out, "alloc"); }

nfn_status nfn_free(nfn_ctx* ctx, void* ptr) {
  NFN_CHECK_CTX(ctx);
  std::free(ptr);
  return NFN_OK;
}

// The CPU's ops finish before they return, so any host memory will do.
nfn_status nfn_alloc_host(nfn_ctx* ctx, size_t bytes, void** out) { return aligned(ctx, bytes, out, "alloc_host"); }

nfn_status nfn_free_host(nfn_ctx* ctx, void* ptr) {
  NFN_CHECK_CTX(ctx);
  std::free(ptr);
  return NFN_OK;
}

nfn_status nfn_fill(nfn_ctx* ctx, void* dst, nfn_dtype dtype, float value, size_t n) {
  NFN_CHECK_CTX(ctx);
  if (dst == nullptr && n > 0) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "fill: null dst");
  if (dtype == NFN_F32) {
    float* d = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (size_t i = 0; i < n; ++i) d[i] = value;
    return NFN_OK;
  }
  if (dtype == NFN_BF16) {
    uint16_t v = nfn::cpu::f32_to_bf16(value);
    uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (size_t i = 0; i < n; ++i) d[i] = v;
    return NFN_OK;
  }
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "fill: unknown dtype %d", static_cast<int>(dtype));
}

nfn_status nfn_copy(nfn_ctx* ctx, void* dst, const void* src, size_t bytes,
                    nfn_copy_kind /*kind: host and device memory are one on the CPU*/) {
  NFN_CHECK_CTX(ctx);
  if ((dst == nullptr || src == nullptr) && bytes > 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "copy: null pointer");
  if (bytes > 0) std::memmove(dst, src, bytes);
  return NFN_OK;
}

nfn_status nfn_convert(nfn_ctx* ctx, void* dst, nfn_dtype dst_dtype, const void* src,
                       nfn_dtype src_dtype, size_t n) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_storage_dtype(ctx, "convert", dst_dtype));
  NFN_RETURN_IF_ERROR(nfn::cpu::check_storage_dtype(ctx, "convert", src_dtype));
  NFN_REQUIRE((dst != nullptr && src != nullptr) || n == 0, "convert: null pointer");
  const bool big = n > (1 << 16);
  if (dst_dtype == src_dtype) {
    std::memmove(dst, src, n * (dst_dtype == NFN_F32 ? 4 : 2));
  } else if (dst_dtype == NFN_BF16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (big)
    for (size_t i = 0; i < n; ++i) d[i] = nfn::cpu::f32_to_bf16(s[i]);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) if (big)
    for (size_t i = 0; i < n; ++i) d[i] = nfn::cpu::bf16_to_f32(s[i]);
  }
  return NFN_OK;
}

nfn_status nfn_widen_tokens(nfn_ctx* ctx, int32_t* dst, const uint16_t* src, size_t n) {
  NFN_CHECK_CTX(ctx);
  NFN_REQUIRE((dst != nullptr && src != nullptr) || n == 0, "widen_tokens: null pointer");
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  return NFN_OK;
}

}  // extern "C"
