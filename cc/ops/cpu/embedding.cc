// Token and learned-position embeddings on the CPU (f32).
#include <omp.h>

#include "cc/ops/cpu/check.h"

using nfn::cpu::fail;

namespace {

nfn_status check_geometry(nfn_ctx* ctx, const char* op, const int32_t* tokens, int B, int T, int C) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0, "%s: B=%d T=%d C=%d must be positive", op, B, T, C);
  NFN_REQUIRE(tokens != nullptr, "%s: null tokens", op);
  for (long i = 0; i < static_cast<long>(B) * T; ++i)
    NFN_REQUIRE(tokens[i] >= 0, "%s: token %d at position %ld is negative", op, tokens[i], i);
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_embedding_forward(nfn_ctx* ctx, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "embedding_forward", dtype));
  NFN_REQUIRE(out != nullptr && wte != nullptr, "embedding_forward: null out or wte");
  NFN_RETURN_IF_ERROR(check_geometry(ctx, "embedding_forward", tokens, B, T, C));
  float* o = static_cast<float*>(out);
  const float* te = static_cast<const float*>(wte);
  const float* pe = static_cast<const float*>(wpe);
#pragma omp parallel for schedule(static)
  for (long bt = 0; bt < static_cast<long>(B) * T; ++bt) {
    const float* tok_row = te + static_cast<size_t>(tokens[bt]) * C;
    float* out_row = o + static_cast<size_t>(bt) * C;
    if (pe != nullptr) {
      const float* pos_row = pe + static_cast<size_t>(bt % T) * C;
      for (int c = 0; c < C; ++c) out_row[c] = tok_row[c] + pos_row[c];
    } else {
      for (int c = 0; c < C; ++c) out_row[c] = tok_row[c];
    }
  }
  return NFN_OK;
}

nfn_status nfn_embedding_backward(nfn_ctx* ctx, void* dwte, void* dwpe, const void* dout,
                                  const int32_t* tokens, int B, int T, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "embedding_backward", dtype));
  NFN_REQUIRE(dwte != nullptr && dout != nullptr, "embedding_backward: null dwte or dout");
  NFN_RETURN_IF_ERROR(check_geometry(ctx, "embedding_backward", tokens, B, T, C));
  float* dte = static_cast<float*>(dwte);
  float* dpe = static_cast<float*>(dwpe);
  const float* d = static_cast<const float*>(dout);
  // Rows of dwte repeat across tokens, so threads split the channels instead: no two
  // threads touch the same element, and every sum runs in the same order (deterministic).
#pragma omp parallel
  {
    const int nth = omp_get_num_threads(), th = omp_get_thread_num();
    const int c0 = static_cast<int>(static_cast<long>(C) * th / nth);
    const int c1 = static_cast<int>(static_cast<long>(C) * (th + 1) / nth);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const size_t bt = static_cast<size_t>(b) * T + t;
        const float* g = d + bt * C;
        float* tok_row = dte + static_cast<size_t>(tokens[bt]) * C;
        for (int c = c0; c < c1; ++c) tok_row[c] += g[c];
        if (dpe != nullptr) {
          float* pos_row = dpe + static_cast<size_t>(t) * C;
          for (int c = c0; c < c1; ++c) pos_row[c] += g[c];
        }
      }
  }
  return NFN_OK;
}

}  // extern "C"
