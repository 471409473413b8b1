// The CPU backend's context and the helpers every CPU op shares.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"
#include "cc/util/bf16.h"

namespace nfn::cpu {
struct GemmState;
// Scratch slots: each op that needs temporary memory owns one, so nested use cannot clash.
// kScratchKeyGrads: attention_backward's per-query-head dK and dV (grouped-query heads).
enum ScratchSlot { kScratchLogits, kScratchAttention, kScratchKeyGrads, kScratchMuon, kScratchSlots };
}  // namespace nfn::cpu

struct nfn_ctx {
  std::string last_error;
  std::string device_name;  // the CPU's model, for nfn_ctx_query's "device" (query.cc)
  bool matmul_bf16 = false;  // GEMMs in bf16 with f32 accumulation ("matmul" option)
  int lm_head_rows = 0;      // rows per LM-head chunk ("lm_head_rows" option; 0: by vocabulary size)
  nfn::cpu::GemmState* gemm = nullptr;  // oneDNN engine and primitive cache (gemm_bf16.cc)
  std::vector<float> scratch[nfn::cpu::kScratchSlots];
  std::vector<uint16_t> scratch_bf16[nfn::cpu::kScratchSlots];  // operands rounded in matmul=bf16 mode
  ~nfn_ctx();
};

namespace nfn::cpu {

// The CPU's model name as the system gives it (Linux: /proc/cpuinfo), "" where it does not.
std::string cpu_model_name();

// Records a formatted message on the context and returns `status`.
nfn_status fail(nfn_ctx* ctx, nfn_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// A scratch buffer of at least n floats that lives as long as the context (grown, never shrunk).
inline float* scratch_floats(nfn_ctx* ctx, ScratchSlot slot, size_t n) {
  std::vector<float>& v = ctx->scratch[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline uint16_t* scratch_bf16(nfn_ctx* ctx, ScratchSlot slot, size_t n) {
  std::vector<uint16_t>& v = ctx->scratch_bf16[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

using nfn::bf16_to_f32;
using nfn::f32_to_bf16;

}  // namespace nfn::cpu
