// What the CPU attention's f32 path (attention.cc) and its matmul=bf16 path
// (attention_bf16.cc) share: each thread takes whole (batch, head) blocks and walks their
// query tiles with single-threaded products in its own scratch.
#pragma once

#include <omp.h>

#include <cmath>

#include "cc/ops/cpu/context.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/reduce_math.h"

namespace nfn::cpu::attention {

// Query rows per tile: small enough to skip masked work, large enough for efficient GEMMs.
constexpr int kQueryTile = 64;

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

// Runs fn(block, thread) for every (batch, head) block, in parallel; thread is
// omp_get_thread_num(), below omp_get_max_threads(), for the caller's per-thread scratch.
template <typename Fn>
void for_each_block(int B, int T, int C, int NH, Fn fn) {
  const long blocks = static_cast<long>(B) * NH;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < blocks; ++i) fn(Block{i / NH, i % NH, T, C, C / NH}, omp_get_thread_num());
}

// Thread `thread`'s part of the op's scratch: f32 floats and bf16 values, sized for
// omp_get_max_threads() threads. Call it once outside the parallel region first: it grows
// the buffers there, and inside only reads them.
struct Scratch {
  float* f32;
  uint16_t* bf16;
};
inline Scratch thread_scratch(nfn_ctx* ctx, long f32, long bf16, int thread) {
  const int threads = omp_get_max_threads();
  float* f = scratch_floats(ctx, kScratchAttention, threads * f32);
  uint16_t* h = scratch_bf16(ctx, kScratchAttention, threads * bf16);
  return {f + thread * f32, h + thread * bf16};
}

// Causal softmax of a row of r1 scores in place, of which the first n are kept: returns the
// row's log-sum-exp and leaves its probabilities, zeros past n.
inline float softmax_row(float* p, int n, int r1) {
  const float m = row_max(p, n);
  for (int j = 0; j < n; ++j) p[j] = fast_exp(p[j] - m);
  const float sum = row_sum(p, n);
  const float inv = 1.f / sum;
  for (int j = 0; j < n; ++j) p[j] *= inv;
  for (int j = n; j < r1; ++j) p[j] = 0.f;
  return m + std::log(sum);
}

// The backward's row: scores s become probabilities P = exp(s - lse), and dP (dp) becomes
// dS = P (dP - D) scale, where D = rowdot(dout, out); zeros past the n kept keys.
inline void gradient_row(float* s, float* dp, int n, int r1, float lse, float D, float scale) {
  for (int j = 0; j < n; ++j) {
    s[j] = fast_exp(s[j] - lse);
    dp[j] = s[j] * (dp[j] - D) * scale;
  }
  for (int j = n; j < r1; ++j) s[j] = dp[j] = 0.f;
}

// The matmul=bf16 path (attention_bf16.cc): q, k, v, the probabilities and dout rounded to
// bf16, the products accumulated in f32, the softmax and its statistics in f32. Arguments
// as nfn_attention_forward/backward's, already checked.
nfn_status forward_bf16(nfn_ctx* ctx, float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
nfn_status backward_bf16(nfn_ctx* ctx, float* dqkv, const float* dout, const float* qkv, const float* out,
                         const float* lse, int B, int T, int C, int NH);

}  // namespace nfn::cpu::attention
