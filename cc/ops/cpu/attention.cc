// Causal scaled-dot-product attention on the CPU (f32), flash style: the forward saves each
// row's log-sum-exp and the backward recomputes the probabilities from it, so no (T,T)
// matrix outlives a call. Each thread takes whole (batch, head) blocks and walks their query
// tiles with single-threaded GEMMs in its own scratch, so a tile's scores stay in cache and
// threads never wait for each other; tile i needs only keys up to its last row, which skips
// most of the masked half of the scores. A block's result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/reduce_math.h"

using nfn::cpu::fast_exp;
using nfn::cpu::Gemm;

namespace {

// Query rows per tile: small enough to skip masked work, large enough for efficient GEMMs.
constexpr int kQueryTile = 64;

nfn_status check_geometry(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B=%d T=%d C=%d NH=%d must be positive", op,
              B, T, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  return NFN_OK;
}

// One (batch, head) block: its q, k, v columns in qkv (B,T,3C) and its columns in a (B,T,C)
// tensor such as out or dout. Row r of q is q + r * ld.
struct Block {
  long b, h, T, C, hs;
  template <typename F>
  F* q(F* qkv) const { return qkv + b * T * 3 * C + h * hs; }
  template <typename F>
  F* k(F* qkv) const { return q(qkv) + C; }
  template <typename F>
  F* v(F* qkv) const { return q(qkv) + 2 * C; }
  template <typename F>
  F* rows(F* btc) const { return btc + b * T * C + h * hs; }
};

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

// Runs fn(block, scratch) for every (batch, head) block in parallel; each thread owns
// `per_thread` floats of scratch.
template <typename Fn>
void for_each_block(nfn_ctx* ctx, int B, int T, int C, int NH, long per_thread, Fn fn) {
  const int threads = omp_get_max_threads();
  float* scratch = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention, threads * per_thread);
  const long blocks = static_cast<long>(B) * NH;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < blocks; ++i)
    fn(Block{i / NH, i % NH, T, C, C / NH}, scratch + omp_get_thread_num() * per_thread);
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B,
                                 int T, int C, int NH, nfn_dtype dtype) {
  const char* op = "attention_forward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(out && lse && qkv, "attention_forward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  float* y = static_cast<float*>(out);
  const long ld = 3L * C, hs = C / NH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  for_each_block(ctx, B, T, C, NH, static_cast<long>(kQueryTile) * T, [&](const Block& blk, float* S) {
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    float* o = blk.rows(y);
    float* row_lse = lse + (blk.b * NH + blk.h) * T;
    for (int r0 = 0; r0 < T; r0 += kQueryTile) {
      const int r1 = std::min(T, r0 + kQueryTile), rows = r1 - r0;
      product(rows, r1, hs, q + r0 * ld, ld, false, k, ld, true, S, r1, scale, false);  // S = Q K^T
      for (int i = 0; i < rows; ++i) {  // causal softmax in place: row r0+i keeps keys 0..r0+i
        float* p = S + static_cast<long>(i) * r1;
        const int n = r0 + i + 1;
        const float m = nfn::cpu::row_max(p, n);
        for (int j = 0; j < n; ++j) p[j] = fast_exp(p[j] - m);
        const float sum = nfn::cpu::row_sum(p, n);
        const float inv = 1.f / sum;
        for (int j = 0; j < n; ++j) p[j] *= inv;
        for (int j = n; j < r1; ++j) p[j] = 0.f;
        row_lse[r0 + i] = m + std::log(sum);
      }
      product(rows, hs, r1, S, r1, false, v, ld, false, o + r0 * C, C, 1.f, false);  // O = P V
    }
  });
  return NFN_OK;
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* lse, int B, int T, int C, int NH,
                                  nfn_dtype dtype) {
  const char* op = "attention_backward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward: null pointer");
  const float* x = static_cast<const float*>(qkv);
  const float* go = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dqkv);
  const long ld = 3L * C, hs = C / NH, tile = static_cast<long>(kQueryTile) * T;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  for_each_block(ctx, B, T, C, NH, 2 * tile, [&](const Block& blk, float* P) {
    float* dS = P + tile;
    const float *q = blk.q(x), *k = blk.k(x), *v = blk.v(x);
    const float *o = blk.rows(y), *dO = blk.rows(go);
    float *dq = blk.q(dx), *dk = blk.k(dx), *dv = blk.v(dx);
    const float* row_lse = lse + (blk.b * NH + blk.h) * T;
    // The last tile sees every key, so going backwards its dK and dV products overwrite and
    // the earlier tiles' accumulate.
    const int last = (T - 1) / kQueryTile * kQueryTile;
    for (int r0 = last; r0 >= 0; r0 -= kQueryTile) {
      const int r1 = std::min(T, r0 + kQueryTile), rows = r1 - r0;
      const bool first = r0 == last;
      product(rows, r1, hs, q + r0 * ld, ld, false, k, ld, true, P, r1, scale, false);  // S
      product(rows, r1, hs, dO + r0 * C, C, false, v, ld, true, dS, r1, 1.f, false);  // dP = dO V^T
      for (int i = 0; i < rows; ++i) {  // P = exp(S - lse), dS = P (dP - rowdot(dO, O)) scale
        const long at = static_cast<long>(r0 + i) * C;
        const float D = nfn::cpu::row_dot(dO + at, o + at, hs);
        const float l = row_lse[r0 + i];
        float* pr = P + static_cast<long>(i) * r1;
        float* dsr = dS + static_cast<long>(i) * r1;
        const int n = r0 + i + 1;
        for (int j = 0; j < n; ++j) {
          pr[j] = fast_exp(pr[j] - l);
          dsr[j] = pr[j] * (dsr[j] - D) * scale;
        }
        for (int j = n; j < r1; ++j) pr[j] = dsr[j] = 0.f;
      }
      product(rows, hs, r1, dS, r1, false, k, ld, false, dq + r0 * ld, ld, 1.f, false);  // dQ = dS K
      product(r1, hs, rows, dS, r1, true, q + r0 * ld, ld, false, dk, ld, 1.f, !first);  // dK += dS^T Q
      product(r1, hs, rows, P, r1, true, dO + r0 * C, C, false, dv, ld, 1.f, !first);  // dV += P^T dO
    }
  });
  return NFN_OK;
}

}  // extern "C"
