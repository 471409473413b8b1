// Causal scaled-dot-product attention on the CPU (f32), flash style: the forward saves each
// row's log-sum-exp and the backward recomputes the probabilities from it, so no (T,T)
// matrix outlives a call. The products are batched oneDNN GEMMs over groups of (batch,
// head) blocks whose (T,T) scores fit a fixed scratch budget.
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

nfn_status check_geometry(nfn_ctx* ctx, const char* op, int B, int T, int C, int NH) {
  NFN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B=%d T=%d C=%d NH=%d must be positive", op,
              B, T, C, NH);
  NFN_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  return NFN_OK;
}

// A rectangle of (batch, head) blocks processed together: whole batches when all heads fit.
struct Group {
  int b0, nb, h0, nh;
};

template <typename Fn>
nfn_status for_each_group(int B, int T, int NH, Fn fn) {
  const long fit = std::max(1L, kScoreBudget / (static_cast<long>(T) * T));
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

// The shape every product of this op shares: (T x T) blocks in a (nb, nh) grid.
struct Layout {
  int T, C, hs;
  long C3() const { return 3L * C; }
  // Offsets of block (b, h) in qkv (q; +C for k, +2C for v), in out/dout, in scores.
  long qkv_at(int b, int h) const { return static_cast<long>(b) * T * C3() + static_cast<long>(h) * hs; }
  long out_at(int b, int h) const { return static_cast<long>(b) * T * C + static_cast<long>(h) * hs; }
};

// Block strides of an operand that is a head slice of qkv or out (row stride ld): the next
// batch is T rows down, the next head hs columns right.
void head_strides(long ld, const Layout& L, int64_t* stride) {
  stride[0] = static_cast<int64_t>(L.T) * ld;
  stride[1] = L.hs;
}

// Block strides of a (nb, nh, T, T) score buffer.
void score_strides(const Layout& L, const Group& g, int64_t* stride) {
  stride[0] = static_cast<int64_t>(g.nh) * L.T * L.T;
  stride[1] = static_cast<int64_t>(L.T) * L.T;
}

// S (nb,nh,T,T) = scale * Q K^T for the group.
nfn_status scores(nfn_ctx* ctx, const char* op, const float* qkv, float* S, const Layout& L,
                  const Group& g, float scale) {
  Gemm m;
  m.M = L.T, m.N = L.T, m.K = L.hs;
  m.A = qkv + L.qkv_at(g.b0, g.h0), m.lda = L.C3();
  m.B = qkv + L.qkv_at(g.b0, g.h0) + L.C, m.ldb = L.C3(), m.trans_b = true;
  m.C = S, m.ldc = L.T;
  head_strides(L.C3(), L, m.stride_a);
  head_strides(L.C3(), L, m.stride_b);
  score_strides(L, g, m.stride_c);
  m.batch[0] = g.nb, m.batch[1] = g.nh;
  m.alpha = scale;
  m.allow_bf16 = false;
  return nfn::cpu::gemm(ctx, op, m);
}

// A product whose A operand is a (T,T) score block (optionally transposed) and whose B
// operand and output are head slices: C(T,hs) = op(P) @ Bh.
nfn_status scores_times_head(nfn_ctx* ctx, const char* op, const float* P, bool trans_p,
                             const float* b, long ldb, float* c, long ldc, const Layout& L,
                             const Group& g) {
  Gemm m;
  m.M = L.T, m.N = L.hs, m.K = L.T;
  m.A = P, m.lda = L.T, m.trans_a = trans_p;
  m.B = b, m.ldb = ldb;
  m.C = c, m.ldc = ldc;
  score_strides(L, g, m.stride_a);
  head_strides(ldb, L, m.stride_b);
  head_strides(ldc, L, m.stride_c);
  m.batch[0] = g.nb, m.batch[1] = g.nh;
  m.allow_bf16 = false;
  return nfn::cpu::gemm(ctx, op, m);
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
  const Layout L{T, C, C / NH};
  const float scale = 1.f / std::sqrt(static_cast<float>(L.hs));
  return for_each_group(B, T, NH, [&](const Group& g) -> nfn_status {
    const long blocks = static_cast<long>(g.nb) * g.nh;
    float* S = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention, blocks * T * T);
    NFN_RETURN_IF_ERROR(scores(ctx, op, x, S, L, g, scale));
    // Causal softmax of each row in place; row t keeps columns 0..t.
#pragma omp parallel for schedule(static)
    for (long r = 0; r < blocks * T; ++r) {
      const int t = static_cast<int>(r % T);
      const long blk = r / T;
      float* s = S + r * T;
      const float m = nfn::cpu::row_max(s, t + 1);
      for (int j = 0; j <= t; ++j) s[j] = fast_exp(s[j] - m);
      const float sum = nfn::cpu::row_sum(s, t + 1);
      const float inv = 1.f / sum;
      for (int j = 0; j <= t; ++j) s[j] *= inv;
      for (int j = t + 1; j < T; ++j) s[j] = 0.f;
      const int b = g.b0 + static_cast<int>(blk / g.nh), h = g.h0 + static_cast<int>(blk % g.nh);
      lse[(static_cast<long>(b) * NH + h) * T + t] = m + std::log(sum);
    }
    // out = P V
    return scores_times_head(ctx, op, S, false, x + L.qkv_at(g.b0, g.h0) + 2 * C, L.C3(),
                             y + L.out_at(g.b0, g.h0), C, L, g);
  });
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
  const Layout L{T, C, C / NH};
  const float scale = 1.f / std::sqrt(static_cast<float>(L.hs));
  return for_each_group(B, T, NH, [&](const Group& g) -> nfn_status {
    const long blocks = static_cast<long>(g.nb) * g.nh;
    float* P = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchAttention, 2 * blocks * T * T);
    float* dS = P + blocks * T * T;
    NFN_RETURN_IF_ERROR(scores(ctx, op, x, P, L, g, scale));
    {  // dP = dO V^T
      Gemm m;
      m.M = T, m.N = T, m.K = L.hs;
      m.A = go + L.out_at(g.b0, g.h0), m.lda = C;
      m.B = x + L.qkv_at(g.b0, g.h0) + 2 * C, m.ldb = L.C3(), m.trans_b = true;
      m.C = dS, m.ldc = T;
      head_strides(C, L, m.stride_a);
      head_strides(L.C3(), L, m.stride_b);
      score_strides(L, g, m.stride_c);
      m.batch[0] = g.nb, m.batch[1] = g.nh;
      m.allow_bf16 = false;
      NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, op, m));
    }
    // P = exp(S - lse) (causal), dS = P * (dP - rowdot(dO, O)) * scale.
#pragma omp parallel for schedule(static)
    for (long r = 0; r < blocks * T; ++r) {
      const int t = static_cast<int>(r % T);
      const long blk = r / T;
      const int b = g.b0 + static_cast<int>(blk / g.nh), h = g.h0 + static_cast<int>(blk % g.nh);
      const float l = lse[(static_cast<long>(b) * NH + h) * T + t];
      const float* gor = go + L.out_at(b, h) + static_cast<long>(t) * C;
      const float* yr = y + L.out_at(b, h) + static_cast<long>(t) * C;
      const float D = nfn::cpu::row_dot(gor, yr, L.hs);
      float* p = P + r * T;
      float* ds = dS + r * T;
      for (int j = 0; j <= t; ++j) {
        p[j] = fast_exp(p[j] - l);
        ds[j] = p[j] * (ds[j] - D) * scale;
      }
      for (int j = t + 1; j < T; ++j) p[j] = ds[j] = 0.f;
    }
    float* dq = dx + L.qkv_at(g.b0, g.h0);
    // dQ = dS K, dK = dS^T Q, dV = P^T dO (each block written once: overwrite)
    NFN_RETURN_IF_ERROR(scores_times_head(ctx, op, dS, false, x + L.qkv_at(g.b0, g.h0) + C, L.C3(),
                                          dq, L.C3(), L, g));
    NFN_RETURN_IF_ERROR(scores_times_head(ctx, op, dS, true, x + L.qkv_at(g.b0, g.h0), L.C3(),
                                          dq + C, L.C3(), L, g));
    return scores_times_head(ctx, op, P, true, go + L.out_at(g.b0, g.h0), C, dq + 2 * C, L.C3(),
                             L, g);
  });
}

}  // extern "C"
