// nfn_ctx_query for the CUDA library: the device, the attention path, the fused epilogues'
// counts, what gemm_tune did and whether the ThunderKittens attention runs here, each built
// into the context's answer buffer on the call (the keys are in nfn_tile_ops.h).
#include <cstring>
#include <string>
#include <utility>

#include "cuda/ops/attention_cudnn.h"
#include "cuda/ops/context.h"
#include "cuda/ops/cublaslt.h"
#include "cuda/ops/tuned_picks.h"
#include "cuda/tk/bridge.h"

namespace {

// "off", or "on: 12 shapes timed, 0 taken from <file>" ("..., no picks file" with
// gemm_tune_cache=off or no home).
std::string gemm_tune_report(const nfn_ctx* ctx) {
  if (!ctx->gemm_tune && ctx->gemm_timed == 0 && ctx->gemm_kept == 0) return "off";
  const auto* picks = static_cast<const nfn::cuda::TunedPicks*>(ctx->tuned_picks);
  return "on: " + std::to_string(ctx->gemm_timed) + " shapes timed, " + std::to_string(ctx->gemm_kept) +
         " taken from " + (picks != nullptr ? picks->path : std::string("no picks file"));
}

// How often each fused cuBLASLt epilogue ran fused (linear.cu counts them), e.g.
// "gelu_aux_bias 24/24, dgelu_bgrad 12/12 fused"; "" before any bf16 linear. The unfused form
// runs where cuBLASLt has no kernel or its rules refuse the shape.
std::string fused_epilogues_report(const nfn_ctx* ctx) {
  using nfn::cuda::GemmEpilogue;
  static const std::pair<GemmEpilogue, const char*> names[] = {
      {GemmEpilogue::none, "none"},   {GemmEpilogue::bias, "bias"},   {GemmEpilogue::gelu_aux, "gelu_aux"},
      {GemmEpilogue::gelu_aux_bias, "gelu_aux_bias"}, {GemmEpilogue::dgelu, "dgelu"},
      {GemmEpilogue::dgelu_bgrad, "dgelu_bgrad"}};
  std::string out;
  for (const auto& [e, name] : names) {
    const auto& calls = ctx->epilogue_calls[static_cast<int>(e)];
    const unsigned long long fused = calls[1], all = fused + calls[0];
    if (all == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(fused) + "/" + std::to_string(all);
  }
  return out.empty() ? out : out + " fused";
}

// The attention path in use, with what it sends elsewhere and why the default gave way.
std::string attention_report(const nfn_ctx* ctx) {
  switch (ctx->attention) {
    case nfn_attention_path::thunderkittens:
      return "thunderkittens (nfn's wgmma kernels on ThunderKittens; flash_mma for grouped-query heads and "
             "sliding windows)";
    case nfn_attention_path::flash_mma:
      if (!ctx->attention_fallback.empty()) return ctx->attention_fallback;
      return "flash_mma (nfn's tensor-core kernel; flash_simt for f32 and head sizes that are not a multiple of 16)";
    case nfn_attention_path::cudnn: {
      std::string out = std::string(nfn::cuda::cudnn_path_name()) +
                        "; flash_simt for f32 and head sizes that are not a multiple of 8; flash_mma for "
                        "grouped-query heads and sliding windows";
      if (!nfn::cuda::cudnn_deterministic(ctx))
        out += "; its backward adds dQ with atomics, so runs do not repeat bit for bit";
      else if (!ctx->attention_fallback.empty())
        out += "; " + ctx->attention_fallback;
      return out;
    }
    default: return "flash_simt (nfn's own kernel)";
  }
}

}  // namespace

extern "C" const char* nfn_ctx_query(const nfn_ctx* ctx, const char* key) {
  if (key == nullptr) return nullptr;
  if (std::strcmp(key, "thunderkittens") == 0) {
    const char* why = nfn_tk_unavailable_reason();
    return why != nullptr ? why : "available";
  }
  if (ctx == nullptr) return nullptr;
  if (std::strcmp(key, "device") == 0) return ctx->device_name.c_str();
  if (std::strcmp(key, "attention") == 0) ctx->query_answer = attention_report(ctx);
  else if (std::strcmp(key, "fused_epilogues") == 0) ctx->query_answer = fused_epilogues_report(ctx);
  else if (std::strcmp(key, "gemm_tune") == 0) ctx->query_answer = gemm_tune_report(ctx);
  else return nullptr;
  return ctx->query_answer.c_str();
}
