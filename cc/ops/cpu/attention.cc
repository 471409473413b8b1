// Causal scaled-dot-product attention on the CPU, flash style (f32 here; matmul=bf16 mode in
// attention_bf16.cc): the forward saves each row's log-sum-exp and the backward recomputes
// the probabilities from it, so no (T,T) matrix outlives a call. Each thread takes whole
// (batch, query head) blocks and walks their query tiles with single-threaded GEMMs in its own
// scratch, so a tile's scores stay in cache and threads never wait for each other; a tile's
// products span only the keys its rows see (up to its last row, from its first row's window
// start), which skips most of the masked half of the scores, and all but about window/T of
// them under a sliding window. A block's result does not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <string>

#include "cc/ops/cpu/attention_blocks.h"
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/reduce_math.h"

using nfn::cpu::Gemm;
using nfn::cpu::attention::Block;
using nfn::cpu::attention::for_each_block;
using nfn::cpu::attention::Geometry;
using nfn::cpu::attention::KeyGrads;
using nfn::cpu::attention::kQueryTile;
using nfn::cpu::attention::thread_scratch;
using nfn::cpu::attention::Tile;

namespace {

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

// The dtype, then the geometry (nfn::attention::check_args, shared with the CUDA library).
nfn_status check(nfn_ctx* ctx, const char* op, nfn_dtype dtype, const Geometry& g) {
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  const std::string why = nfn::attention::check_args(op, g.B, g.T, g.NH, g.NKV, g.HD, g.window);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T, int NH,
                                 int NKV, int HD, int window, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const Geometry g{B, T, NH, NKV, HD, window};
  NFN_RETURN_IF_ERROR(check(ctx, "attention_forward", dtype, g));
  NFN_REQUIRE(out && lse && qkv, "attention_forward: null out, lse or qkv");
  const float* x = static_cast<const float*>(qkv);
  float* y = static_cast<float*>(out);
  if (ctx->matmul_bf16) return nfn::cpu::attention::forward_bf16(ctx, y, lse, x, g);
  const long ld = g.ld(), C = g.C(), tile = kQueryTile * g.max_keys();
  const float scale = g.scale();
  thread_scratch(ctx, tile, 0, 0);  // sized outside the parallel region
  for_each_block(g, [&](const Block& blk, int thread) {
    float* S = thread_scratch(ctx, tile, 0, thread).f32;
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    float *o = blk.rows(y), *row_lse = blk.stats(lse);
    for (int r0 = 0; r0 < T; r0 += kQueryTile) {
      const Tile t(g, r0);
      const int rows = t.rows(), width = t.width();
      product(rows, width, HD, q + r0 * ld, ld, false, k + t.k0 * ld, ld, true, S, width, scale, false);  // S = Q K^T
      for (int i = 0; i < rows; ++i) {
        float* row = S + static_cast<long>(i) * width;
        row_lse[r0 + i] = nfn::cpu::attention::softmax_row(row, t.begin(i), t.end(i), width);
      }
      product(rows, HD, width, S, width, false, v + t.k0 * ld, ld, false, o + r0 * C, C, 1.f, false);  // O = P V
    }
  });
  return NFN_OK;
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                                  const float* lse, int B, int T, int NH, int NKV, int HD, int window,
                                  nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const Geometry g{B, T, NH, NKV, HD, window};
  NFN_RETURN_IF_ERROR(check(ctx, "attention_backward", dtype, g));
  NFN_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward: null dqkv, dout, qkv, out or lse");
  const float* x = static_cast<const float*>(qkv);
  const float* go = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dqkv);
  if (ctx->matmul_bf16) return nfn::cpu::attention::backward_bf16(ctx, dx, go, x, y, lse, g);
  const long ld = g.ld(), C = g.C(), tile = kQueryTile * g.max_keys();
  const float scale = g.scale();
  thread_scratch(ctx, 2 * tile, 0, 0);
  const KeyGrads grads(ctx, g, dx);
  const long gld = grads.ld();
  for_each_block(g, [&](const Block& blk, int thread) {
    float* P = thread_scratch(ctx, 2 * tile, 0, thread).f32;
    float* dS = P + tile;
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    const float *o = blk.rows(y), *dO = blk.rows(go), *row_lse = blk.stats(lse);
    float *dq = blk.q(dx), *dk = grads.dk(blk), *dv = grads.dv(blk);
    // Going backwards, the last tile's dK and dV products overwrite the rows of the keys it
    // sees (every key without a window), the keys before those start at zero, and the earlier
    // tiles add to theirs.
    const int last = nfn::cpu::attention::last_tile(T);
    nfn::cpu::attention::zero_rows(dk, Tile(g, last).k0, HD, gld);
    nfn::cpu::attention::zero_rows(dv, Tile(g, last).k0, HD, gld);
    for (int r0 = last; r0 >= 0; r0 -= kQueryTile) {
      const Tile t(g, r0);
      const int rows = t.rows(), width = t.width();
      const bool first = r0 == last;
      const float *kt = k + t.k0 * ld, *vt = v + t.k0 * ld, *qt = q + r0 * ld, *dOt = dO + r0 * C;
      product(rows, width, HD, qt, ld, false, kt, ld, true, P, width, scale, false);     // S
      product(rows, width, HD, dOt, C, false, vt, ld, true, dS, width, 1.f, false);      // dP = dO V^T
      for (int i = 0; i < rows; ++i) {
        const long at = (r0 + i) * C;
        nfn::cpu::attention::gradient_row(P + static_cast<long>(i) * width, dS + static_cast<long>(i) * width,
                                          t.begin(i), t.end(i), width, row_lse[r0 + i],
                                          nfn::cpu::row_dot(dO + at, o + at, HD), scale);
      }
      product(rows, HD, width, dS, width, false, kt, ld, false, dq + r0 * ld, ld, 1.f, false);  // dQ = dS K
      product(width, HD, rows, dS, width, true, qt, ld, false, dk + t.k0 * gld, gld, 1.f, !first);  // dK += dS^T Q
      product(width, HD, rows, P, width, true, dOt, C, false, dv + t.k0 * gld, gld, 1.f, !first);   // dV += P^T dO
    }
  });
  grads.finish();
  return NFN_OK;
}

}  // extern "C"
