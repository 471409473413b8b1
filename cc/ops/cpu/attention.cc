// Causal scaled-dot-product attention on the CPU, flash style (f32 here; matmul=bf16 mode in
// attention_bf16.cc): the forward saves each row's log-sum-exp and the backward recomputes
// the probabilities from it, so no (T,T) matrix outlives a call. Each thread takes whole
// (batch, head) blocks and walks their query tiles with single-threaded GEMMs in its own
// scratch, so a tile's scores stay in cache and threads never wait for each other; tile i
// needs only keys up to its last row, which skips most of the masked half of the scores. A
// block's result does not depend on the thread count.

#include <algorithm>
#include <cmath>

#include "cc/ops/cpu/attention_blocks.h"
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/reduce_math.h"

using nfn::cpu::Gemm;
using nfn::cpu::attention::Block;
using nfn::cpu::attention::for_each_block;
using nfn::cpu::attention::kQueryTile;
using nfn::cpu::attention::thread_scratch;

namespace {

nfn_status check_geometry(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B=%d T=%d C=%d NH=%d must be positive", op,
              B, T, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  return NFN_OK;
}

// C (M,N) = alpha op(A) op(B) (+ C) on this thread.
void product(long M, long N, long K, const float* A, long lda, bool trans_a, const float* B,
             long ldb, bool trans_b, float* C, long ldc, float alpha, bool accumulate) {
  Gemm g;
  g.M = M, g.N = N, g.K = K;
  g.A = A, g.lda = lda, g.trans_a = trans_a;
  g.B = B, g.ldb = ldb, g.trans_b = trans_b;
  g.C = C, g.ldc = ldc;
  g.alpha = alpha, g.accumulate = accumulate;
  nfn::cpu::gemm_f32_serial(g);
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B,
                                 int T, int C, int NH, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_forward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(out && lse && qkv, "attention_forward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  float* y = static_cast<float*>(out);
  if (ctx->matmul_bf16) return nfn::cpu::attention::forward_bf16(ctx, y, lse, x, B, T, C, NH);
  const long ld = 3L * C, hs = C / NH, tile = static_cast<long>(kQueryTile) * T;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  thread_scratch(ctx, tile, 0, 0);  // sized outside the parallel region
  for_each_block(B, T, C, NH, [&](const Block& blk, int thread) {
    float* S = thread_scratch(ctx, tile, 0, thread).f32;
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    float* o = blk.rows(y);
    float* row_lse = lse + static_cast<long>(blk.b * NH + blk.h) * T;
    for (int r0 = 0; r0 < T; r0 += kQueryTile) {
      const int r1 = std::min(T, r0 + kQueryTile), rows = r1 - r0;
      product(rows, r1, hs, q + r0 * ld, ld, false, k, ld, true, S, r1, scale, false);  // S = Q K^T
      for (int i = 0; i < rows; ++i)
        row_lse[r0 + i] = nfn::cpu::attention::softmax_row(S + static_cast<long>(i) * r1, r0 + i + 1, r1);
      product(rows, hs, r1, S, r1, false, v, ld, false, o + static_cast<long>(r0) * C, C, 1.f, false);  // O = P V
    }
  });
  return NFN_OK;
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* lse, int B, int T, int C, int NH,
                                  nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "attention_backward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  const float* go = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dqkv);
  if (ctx->matmul_bf16) return nfn::cpu::attention::backward_bf16(ctx, dx, go, x, y, lse, B, T, C, NH);
  const long ld = 3L * C, hs = C / NH, tile = static_cast<long>(kQueryTile) * T;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  thread_scratch(ctx, 2 * tile, 0, 0);
  for_each_block(B, T, C, NH, [&](const Block& blk, int thread) {
    float* P = thread_scratch(ctx, 2 * tile, 0, thread).f32;
    float* dS = P + tile;
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    const float *o = blk.rows(y), *dO = blk.rows(go);
    float *dq = blk.q(dx), *dk = blk.k(dx), *dv = blk.v(dx);
    const float* row_lse = lse + static_cast<long>(blk.b * NH + blk.h) * T;
    // The last tile sees every key, so going backwards its dK and dV products overwrite and
    // the earlier tiles' accumulate.
    const int last = (T - 1) / kQueryTile * kQueryTile;
    for (int r0 = last; r0 >= 0; r0 -= kQueryTile) {
      const int r1 = std::min(T, r0 + kQueryTile), rows = r1 - r0;
      const bool first = r0 == last;
      product(rows, r1, hs, q + r0 * ld, ld, false, k, ld, true, P, r1, scale, false);  // S
      product(rows, r1, hs, dO + static_cast<long>(r0) * C, C, false, v, ld, true, dS, r1, 1.f, false);  // dP = dO V^T
      for (int i = 0; i < rows; ++i) {
        const long at = static_cast<long>(r0 + i) * C;
        nfn::cpu::attention::gradient_row(P + static_cast<long>(i) * r1, dS + static_cast<long>(i) * r1,
                                          r0 + i + 1, r1, row_lse[r0 + i],
                                          nfn::cpu::row_dot(dO + at, o + at, hs), scale);
      }
      product(rows, hs, r1, dS, r1, false, k, ld, false, dq + r0 * ld, ld, 1.f, false);  // dQ = dS K
      product(r1, hs, rows, dS, r1, true, q + r0 * ld, ld, false, dk, ld, 1.f, !first);  // dK += dS^T Q
      product(r1, hs, rows, P, r1, true, dO + static_cast<long>(r0) * C, C, false, dv, ld, 1.f, !first);  // dV += P^T dO
    }
  });
  return NFN_OK;
}

}  // extern "C"
