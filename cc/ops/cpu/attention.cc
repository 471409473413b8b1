// Causal scaled-dot-product attention on the CPU (f32), flash style: the forward saves each
// row's log-sum-exp and the backward recomputes the probabilities from it, so no (T,T)
// matrix outlives a call. The products are batched oneDNN GEMMs over groups of (batch,
// head) blocks, one query tile at a time: tile i needs only keys up to its last row, which
// skips most of the masked half of the scores.
#include <algorithm>
#include <cmath>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/reduce_math.h"

using nfn::cpu::Gemm;
using nfn::cpu::fast_exp;

namespace {

// Scores per scratch buffer (16 MB): bounds memory for long sequences.
constexpr long kScoreBudget = 1L << 22;
// Query rows per tile: small enough to skip masked work, large enough for efficient GEMMs.
constexpr int kQueryTile = 64;

nfn_status check_geometry(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B=%d T=%d C=%d NH=%d must be positive", op,
              B, T, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  return NFN_OK;
}

// A rectangle of (batch, head) blocks processed together: whole batches when all heads fit.
struct Group {
  int b0, nb, h0, nh;
  long blocks() const { return static_cast<long>(nb) * nh; }
};

template <typename Fn>
nfn_status for_each_group(int B, int T, int NH, Fn fn) {
  const long tile = std::min(T, kQueryTile);
  const long fit = std::max(1L, kScoreBudget / (tile * T));
  for (int b0 = 0; b0 < B;) {
    if (fit >= NH) {
      const int nb = static_cast<int>(std::min<long>(B - b0, fit / NH));
      NFN_RETURN_IF_ERROR(fn(Group{b0, nb, 0, NH}));
      b0 += nb;
      continue;
    }
    for (int h0 = 0; h0 < NH; h0 += static_cast<int>(fit))
      NFN_RETURN_IF_ERROR(fn(Group{b0, 1, h0, static_cast<int>(std::min<long>(NH - h0, fit))}));
    ++b0;
  }
  return NFN_OK;
}

// One query tile: rows [r0, r1) of every block attend to keys [0, r1).
struct Tile {
  int r0, r1;
  int rows() const { return r1 - r0; }
};

// A matrix operand of a batched product: pointer, row stride, and the distance to the
// next batch and the next head.
struct Operand {
  const float* p;
  int64_t ld, batch_stride, head_stride;
};

// Where the heads live: qkv (B,T,3C) with q, k, v side by side; out/dout (B,T,C).
struct Layout {
  int T, C, hs;
  const float* qkv;
  Operand head_of(const float* base, long ld, int b, int h, int row) const {
    return {base + (static_cast<long>(b) * T + row) * ld + static_cast<long>(h) * hs, ld,
            static_cast<int64_t>(T) * ld, hs};
  }
  Operand q(const Group& g, int row) const { return head_of(qkv, 3L * C, g.b0, g.h0, row); }
  Operand k(const Group& g, int row) const { Operand o = q(g, row); o.p += C; return o; }
  Operand v(const Group& g, int row) const { Operand o = q(g, row); o.p += 2 * C; return o; }
};

// The (rows, keys) score blocks of a tile in scratch: contiguous per (batch, head).
Operand score_block(const float* base, const Group& g, const Tile& t) {
  const int64_t size = static_cast<int64_t>(t.rows()) * t.r1;
  return {base, t.r1, g.nh * size, size};
}

// C = alpha op(A) op(B) (+ C) for every block of the group.
nfn_status block_gemm(nfn_ctx* ctx, const char* op, const Group& g, int64_t M, int64_t N,
                      int64_t K, Operand a, bool trans_a, Operand b, bool trans_b, float* c,
                      Operand c_layout, float alpha, bool accumulate) {
  Gemm m;
  m.M = M, m.N = N, m.K = K;
  m.A = a.p, m.lda = a.ld, m.trans_a = trans_a;
  m.B = b.p, m.ldb = b.ld, m.trans_b = trans_b;
  m.C = c, m.ldc = c_layout.ld;
  m.stride_a[0] = a.batch_stride, m.stride_a[1] = a.head_stride;
  m.stride_b[0] = b.batch_stride, m.stride_b[1] = b.head_stride;
  m.stride_c[0] = c_layout.batch_stride, m.stride_c[1] = c_layout.head_stride;
  m.batch[0] = g.nb, m.batch[1] = g.nh;
  m.alpha = alpha;
  m.accumulate = accumulate;
  m.allow_bf16 = false;  // small products that feed exp(): kept f32
  return nfn::cpu::gemm(ctx, op, m);
}

// Calls fn(row, block index, b, h) for every row of the tile in every block, in parallel.
template <typename Fn>
void for_each_row(const Group& g, const Tile& t, Fn fn) {
  const long rows = g.blocks() * t.rows();
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const long blk = r / t.rows();
    fn(t.r0 + static_cast<int>(r % t.rows()), r, g.b0 + static_cast<int>(blk / g.nh),
       g.h0 + static_cast<int>(blk % g.nh));
  }
}

}  // namespace

extern "C" {

nfn_status nfn_attention_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B,
                                 int T, int C, int NH, nfn_dtype dtype) {
  const char* op = "attention_forward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(out && lse && qkv, "attention_forward: null pointer");
  float* y = static_cast<float*>(out);
  const Layout L{T, C, C / NH, static_cast<const float*>(qkv)};
  const float scale = 1.f / std::sqrt(static_cast<float>(L.hs));
  return for_each_group(B, T, NH, [&](const Group& g) -> nfn_status {
    float* S = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention,
                                        g.blocks() * std::min(T, kQueryTile) * T);
    for (int r0 = 0; r0 < T; r0 += kQueryTile) {
      const Tile t{r0, std::min(T, r0 + kQueryTile)};
      const Operand s = score_block(S, g, t);
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.rows(), t.r1, L.hs, L.q(g, t.r0), false,
                                     L.k(g, 0), true, S, s, scale, false));
      // Causal softmax of each row in place; row `row` keeps keys 0..row.
      for_each_row(g, t, [&](int row, long r, int b, int h) {
        float* p = S + r * t.r1;
        const float m = nfn::cpu::row_max(p, row + 1);
        for (int j = 0; j <= row; ++j) p[j] = fast_exp(p[j] - m);
        const float sum = nfn::cpu::row_sum(p, row + 1);
        const float inv = 1.f / sum;
        for (int j = 0; j <= row; ++j) p[j] *= inv;
        for (int j = row + 1; j < t.r1; ++j) p[j] = 0.f;
        lse[(static_cast<long>(b) * NH + h) * T + row] = m + std::log(sum);
      });
      const Operand o = L.head_of(y, C, g.b0, g.h0, t.r0);  // out rows = P V
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.rows(), L.hs, t.r1, s, false, L.v(g, 0), false,
                                     y + (o.p - y), o, 1.f, false));
    }
    return NFN_OK;
  });
}

nfn_status nfn_attention_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* lse, int B, int T, int C, int NH,
                                  nfn_dtype dtype) {
  const char* op = "attention_backward";
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  NFN_RETURN_IF_ERROR(check_geometry(ctx, op, B, T, C, NH));
  NFN_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward: null pointer");
  const float* go = static_cast<const float*>(dout);
  const float* y = static_cast<const float*>(out);
  float* dx = static_cast<float*>(dqkv);
  const Layout L{T, C, C / NH, static_cast<const float*>(qkv)};
  const Layout dL{T, C, C / NH, dx};
  const float scale = 1.f / std::sqrt(static_cast<float>(L.hs));
  return for_each_group(B, T, NH, [&](const Group& g) -> nfn_status {
    const long tile_floats = g.blocks() * std::min(T, kQueryTile) * T;
    float* P = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention, 2 * tile_floats);
    float* dS = P + tile_floats;
    // The last tile sees every key, so going backwards its dK and dV products overwrite and
    // the earlier tiles' accumulate.
    const int last = (T - 1) / kQueryTile * kQueryTile;
    for (int r0 = last; r0 >= 0; r0 -= kQueryTile) {
      const Tile t{r0, std::min(T, r0 + kQueryTile)};
      const bool first = r0 == last;
      const Operand p = score_block(P, g, t), ds = score_block(dS, g, t);
      const Operand go_rows = L.head_of(go, C, g.b0, g.h0, t.r0);
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.rows(), t.r1, L.hs, L.q(g, t.r0), false,
                                     L.k(g, 0), true, P, p, scale, false));
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.rows(), t.r1, L.hs, go_rows, false, L.v(g, 0),
                                     true, dS, ds, 1.f, false));  // dP = dO V^T
      // P = exp(S - lse) (causal), dS = P * (dP - rowdot(dO, O)) * scale.
      for_each_row(g, t, [&](int row, long r, int b, int h) {
        const float l = lse[(static_cast<long>(b) * NH + h) * T + row];
        const long at = (static_cast<long>(b) * T + row) * C + static_cast<long>(h) * L.hs;
        const float D = nfn::cpu::row_dot(go + at, y + at, L.hs);
        float* pr = P + r * t.r1;
        float* dsr = dS + r * t.r1;
        for (int j = 0; j <= row; ++j) {
          pr[j] = fast_exp(pr[j] - l);
          dsr[j] = pr[j] * (dsr[j] - D) * scale;
        }
        for (int j = row + 1; j < t.r1; ++j) pr[j] = dsr[j] = 0.f;
      });
      const Operand dq = dL.q(g, t.r0), dk = dL.k(g, 0), dv = dL.v(g, 0);
      // dQ rows = dS K; dK += dS^T Q rows; dV += P^T dO rows
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.rows(), L.hs, t.r1, ds, false, L.k(g, 0), false,
                                     dx + (dq.p - dx), dq, 1.f, false));
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.r1, L.hs, t.rows(), ds, true, L.q(g, t.r0), false,
                                     dx + (dk.p - dx), dk, 1.f, !first));
      NFN_RETURN_IF_ERROR(block_gemm(ctx, op, g, t.r1, L.hs, t.rows(), p, true, go_rows, false,
                                     dx + (dv.p - dx), dv, 1.f, !first));
    }
    return NFN_OK;
  });
}

}  // extern "C"
