// Causal attention in matmul=bf16 mode: the f32 path's blocks and tiles (attention.cc), the
// grouped-query heads and sliding window included, with each block's q, k, v (and dout)
// rounded to bf16 once, and the tile products run in bf16 on the block's thread through
// oneDNN (gemm_bf16_serial), accumulating in f32. The scores, the softmax, its log-sum-exp
// and dS are computed in f32 and rounded only as the next product's operand, as the CUDA
// library's flash kernels do. f32 OpenBLAS runs these 64-row products at about 43 GFLOP/s a
// thread; oneDNN's bf16 kernels run them at 130-180.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>

#include "cc/ops/cpu/attention_blocks.h"
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/pack.h"

namespace nfn::cpu::attention {

namespace {

// The products of one query tile (rows r0..r1, keys k0..r1: width r1 - k0) of a block whose
// bf16 copies are dense (T, hs) matrices; each names its shape for prepare and run alike.
// Their f32 results are dense too (scores: ld width; the rest: ld hs), copied to out or dqkv
// after: oneDNN runs a product into strided rows with its slower gemm kernels, not brgemm.
GemmBf16 shape(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, bool trans_b, int64_t ldc,
               float alpha = 1.f, bool accumulate = false) {
  GemmBf16 g;
  g.M = M, g.N = N, g.K = K;
  g.lda = lda, g.ldb = ldb, g.trans_b = trans_b, g.ldc = ldc;
  g.alpha = alpha, g.accumulate = accumulate;
  return g;
}
GemmBf16 scores(int rows, int width, int hs, float alpha) { return shape(rows, width, hs, hs, hs, true, width, alpha); }
GemmBf16 times_keys(int rows, int width, int hs) { return shape(rows, hs, width, width, hs, false, hs); }
GemmBf16 key_grad(int rows, int width, int hs, bool accumulate) {
  return shape(width, hs, rows, rows, hs, false, hs, 1.f, accumulate);
}

// Runs g on its operands; false (and the op fails after its parallel region) if oneDNN did.
bool run(nfn_ctx* ctx, GemmBf16 g, const uint16_t* A, const uint16_t* B, float* C, int thread) {
  g.A = A, g.B = B, g.C = C;
  return gemm_bf16_serial(ctx, g, thread);
}

// Every tile's shapes, prepared before the parallel region: shapes_of_tile(tile, last).
template <typename Fn>
nfn_status prepare_tiles(nfn_ctx* ctx, const char* op, const Geometry& g, Fn shapes_of_tile) {
  const int threads = omp_get_max_threads();
  for (int r0 = 0; r0 < g.T; r0 += kQueryTile)
    for (const GemmBf16& s : shapes_of_tile(Tile(g, r0), r0 == last_tile(g.T)))
      NFN_RETURN_IF_ERROR(prepare_gemm_bf16_serial(ctx, op, s, threads));
  return NFN_OK;
}

// A block's (T, hs) columns of a (B, T, ld) tensor, rounded to a dense bf16 (T, hs) matrix.
void round_block(const float* src, long T, long hs, long ld, uint16_t* dst) {
  round_bf16_serial(src, T, hs, ld, false, dst, hs);
}

// Dense (rows, hs) f32 rows to rows of stride ld.
void copy_rows(const float* src, long rows, long hs, float* dst, long ld) {
  for (long r = 0; r < rows; ++r) std::copy(src + r * hs, src + (r + 1) * hs, dst + r * ld);
}

nfn_status oneDNN_failed(nfn_ctx* ctx, const char* op) {
  return fail(ctx, NFN_ERR_BACKEND, "%s: a bf16 product failed inside oneDNN on one of the op's threads", op);
}

}  // namespace

nfn_status forward_bf16(nfn_ctx* ctx, float* y, float* lse, const float* x, const Geometry& g) {
  const char* op = "attention_forward";
  const int T = g.T, hs = g.HD;
  const long ld = g.ld(), C = g.C(), tile = kQueryTile * g.max_keys(), copies = 3L * T * hs;
  const long f32 = tile + kQueryTile * hs;
  const float scale = g.scale();
  NFN_RETURN_IF_ERROR(prepare_tiles(ctx, op, g, [&](const Tile& t, bool) {
    return std::array<GemmBf16, 2>{scores(t.rows(), t.width(), hs, scale), times_keys(t.rows(), t.width(), hs)};
  }));
  thread_scratch(ctx, f32, copies + tile, 0);  // sized here, outside the parallel region
  std::atomic<bool> failed{false};
  for_each_block(g, [&](const Block& blk, int thread) {
    const Scratch s = thread_scratch(ctx, f32, copies + tile, thread);
    float *S = s.f32, *O = S + tile;
    uint16_t *q = s.bf16, *k = q + T * hs, *v = k + T * hs, *P = v + T * hs;
    round_block(blk.q(x), T, hs, ld, q);
    round_block(blk.k(x), T, hs, ld, k);
    round_block(blk.v(x), T, hs, ld, v);
    float *o = blk.rows(y), *row_lse = blk.stats(lse);
    for (int r0 = 0; r0 < T && !failed; r0 += kQueryTile) {
      const Tile t(g, r0);
      const int rows = t.rows(), width = t.width();
      if (!run(ctx, scores(rows, width, hs, scale), q + r0 * hs, k + t.k0 * hs, S, thread)) failed = true;  // S = Q K^T
      for (int i = 0; i < rows; ++i)
        row_lse[r0 + i] = softmax_row(S + static_cast<long>(i) * width, t.begin(i), t.end(i), width);
      round_bf16_serial(S, rows, width, width, false, P, width);
      if (!run(ctx, times_keys(rows, width, hs), P, v + t.k0 * hs, O, thread)) failed = true;  // O = P V
      copy_rows(O, rows, hs, o + r0 * C, C);
    }
  });
  return failed ? oneDNN_failed(ctx, op) : NFN_OK;
}

nfn_status backward_bf16(nfn_ctx* ctx, float* dx, const float* go, const float* x, const float* y,
                         const float* lse, const Geometry& g) {
  const char* op = "attention_backward";
  const int T = g.T, hs = g.HD;
  const long ld = g.ld(), C = g.C(), tile = kQueryTile * g.max_keys(), copies = 4L * T * hs;
  const long f32 = 2 * tile + kQueryTile * hs + 2L * T * hs;
  const float scale = g.scale();
  NFN_RETURN_IF_ERROR(prepare_tiles(ctx, op, g, [&](const Tile& t, bool first) {
    const int rows = t.rows(), width = t.width();
    return std::array<GemmBf16, 4>{scores(rows, width, hs, scale), scores(rows, width, hs, 1.f),
                                   times_keys(rows, width, hs), key_grad(rows, width, hs, !first)};
  }));
  thread_scratch(ctx, f32, copies + 3 * tile, 0);
  const KeyGrads grads(ctx, g, dx);
  std::atomic<bool> failed{false};
  for_each_block(g, [&](const Block& blk, int thread) {
    const Scratch s = thread_scratch(ctx, f32, copies + 3 * tile, thread);
    float *P = s.f32, *dS = P + tile, *dQ = dS + tile, *dK = dQ + kQueryTile * hs, *dV = dK + T * hs;
    uint16_t *q = s.bf16, *k = q + T * hs, *v = k + T * hs, *dO = v + T * hs;
    uint16_t *dS16 = dO + T * hs, *dS16t = dS16 + tile, *P16t = dS16t + tile;
    round_block(blk.q(x), T, hs, ld, q);
    round_block(blk.k(x), T, hs, ld, k);
    round_block(blk.v(x), T, hs, ld, v);
    round_block(blk.rows(go), T, hs, C, dO);
    const float *o = blk.rows(y), *dO32 = blk.rows(go), *row_lse = blk.stats(lse);
    float* dq = blk.q(dx);
    // As in the f32 path: the last tile's dK and dV products overwrite the keys it sees, the
    // keys before those start at zero, and the earlier tiles add.
    const int last = last_tile(T), before = Tile(g, last).k0;
    std::fill(dK, dK + static_cast<long>(before) * hs, 0.f);
    std::fill(dV, dV + static_cast<long>(before) * hs, 0.f);
    for (int r0 = last; r0 >= 0 && !failed; r0 -= kQueryTile) {
      const Tile t(g, r0);
      const int rows = t.rows(), width = t.width();
      const bool first = r0 == last;
      const uint16_t *kt = k + t.k0 * hs, *vt = v + t.k0 * hs;
      bool ok = run(ctx, scores(rows, width, hs, scale), q + r0 * hs, kt, P, thread);  // S
      ok = ok && run(ctx, scores(rows, width, hs, 1.f), dO + r0 * hs, vt, dS, thread);   // dP = dO V^T
      for (int i = 0; i < rows; ++i) {
        const long at = static_cast<long>(r0 + i) * C;
        gradient_row(P + static_cast<long>(i) * width, dS + static_cast<long>(i) * width, t.begin(i), t.end(i), width,
                     row_lse[r0 + i], row_dot(dO32 + at, o + at, hs), scale);
      }
      round_bf16_serial(dS, rows, width, width, false, dS16, width);
      round_bf16_serial(dS, rows, width, width, true, dS16t, rows);
      round_bf16_serial(P, rows, width, width, true, P16t, rows);
      const GemmBf16 key_product = key_grad(rows, width, hs, !first);
      ok = ok && run(ctx, times_keys(rows, width, hs), dS16, kt, dQ, thread);             // dQ = dS K
      ok = ok && run(ctx, key_product, dS16t, q + r0 * hs, dK + t.k0 * hs, thread);  // dK += dS^T Q
      ok = ok && run(ctx, key_product, P16t, dO + r0 * hs, dV + t.k0 * hs, thread);  // dV += P^T dO
      copy_rows(dQ, rows, hs, dq + r0 * ld, ld);
      if (!ok) failed = true;
    }
    copy_rows(dK, T, hs, grads.dk(blk), grads.ld());
    copy_rows(dV, T, hs, grads.dv(blk), grads.ld());
  });
  if (failed) return oneDNN_failed(ctx, op);
  grads.finish();
  return NFN_OK;
}

}  // namespace nfn::cpu::attention
