// What the CPU attention's f32 path (attention.cc) and its matmul=bf16 path
// (attention_bf16.cc) share: each thread takes whole (batch, query head) blocks and walks their
// query tiles with single-threaded products in its own scratch; a tile's products cover only
// the keys its rows see (the causal bound and the sliding window), so a windowed layer costs
// about window/T of a full one.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cc/ops/attention_geometry.h"
#include "cc/ops/cpu/context.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/reduce_math.h"

namespace nfn::cpu::attention {

// Query rows per tile: small enough to skip masked work, large enough for efficient GEMMs.
constexpr int kQueryTile = 64;

// The op's geometry, as nfn_ops.def gives it (already checked).
struct Geometry {
  int B, T, NH, NKV, HD, window;
  long ld() const { return static_cast<long>(NH + 2 * NKV) * HD; }  // a qkv row
  long C() const { return static_cast<long>(NH) * HD; }              // an out row
  int group() const { return NH / NKV; }                              // query heads a kv head
  // The widest key range of any query tile: its scores' row length.
  long max_keys() const { return window > 0 ? std::min<long>(T, kQueryTile + window) : T; }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(HD)); }
};

// Query rows [r0, r1) and the keys [k0, r1) they see between them; row i keeps the columns
// [begin(i), end(i)) of its width() scores.
struct Tile {
  int r0, r1, k0, window;
  Tile(const Geometry& g, int r0)
      : r0(r0), r1(std::min(g.T, r0 + kQueryTile)), k0(nfn::attention::first_key(r0, g.window)), window(g.window) {}
  int rows() const { return r1 - r0; }
  int width() const { return r1 - k0; }
  int begin(int i) const { return nfn::attention::first_key(r0 + i, window) - k0; }
  int end(int i) const { return r0 + i + 1 - k0; }
};

// One (batch, query head) block: its q, k, v columns in qkv (the kv head its group shares)
// and its columns in a (B,T,NH*HD) tensor such as out or dout. Row r of q is q + r * ld().
struct Block {
  Geometry g;
  long b, h;
  long kv_head() const { return h / g.group(); }
  template <typename F>
  F* q(F* qkv) const { return qkv + b * g.T * g.ld() + h * g.HD; }
  template <typename F>
  F* k(F* qkv) const { return qkv + b * g.T * g.ld() + (g.NH + kv_head()) * g.HD; }
  template <typename F>
  F* v(F* qkv) const { return k(qkv) + static_cast<long>(g.NKV) * g.HD; }
  template <typename F>
  F* rows(F* out) const { return out + b * g.T * g.C() + h * g.HD; }
  template <typename F>
  F* stats(F* lse) const { return lse + (b * g.NH + h) * g.T; }
};

// Runs fn(block, thread) for every (batch, query head) block, in parallel; thread is
// omp_get_thread_num(), below omp_get_max_threads(), for the caller's per-thread scratch.
template <typename Fn>
void for_each_block(const Geometry& g, Fn fn) {
  const long blocks = static_cast<long>(g.B) * g.NH;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < blocks; ++i) fn(Block{g, i / g.NH, i % g.NH}, omp_get_thread_num());
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

// Where the backward's blocks put their dK and dV (T rows of HD, `ld` apart). With one query
// head a kv head, straight into dqkv; with more, each query head's into its own partial,
// which finish() then sums over the group in head order into dqkv, so no two threads write
// one row and the sum does not depend on the thread count.
class KeyGrads {
 public:
  // Sizes its buffer: call outside the parallel region.
  KeyGrads(nfn_ctx* ctx, const Geometry& g, float* dqkv) : g_(g), dqkv_(dqkv) {
    if (g.group() > 1) partials_ = scratch_floats(ctx, kScratchKeyGrads, 2L * g.B * g.NH * g.T * g.HD);
  }
  long ld() const { return partials_ ? g_.HD : g_.ld(); }
  float* dk(const Block& blk) const {
    return partials_ ? partials_ + (blk.b * g_.NH + blk.h) * 2L * g_.T * g_.HD : blk.k(dqkv_);
  }
  float* dv(const Block& blk) const {
    return partials_ ? dk(blk) + static_cast<long>(g_.T) * g_.HD : blk.v(dqkv_);
  }
  // Adds the partials of each kv head's query heads into its rows of dqkv (with partials).
  void finish() const {
    if (!partials_) return;
    const long rows = static_cast<long>(g_.B) * g_.NKV * g_.T, HD = g_.HD, G = g_.group();
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
      const long t = r % g_.T, kv = r / g_.T % g_.NKV, b = r / g_.T / g_.NKV;
      const Block first{g_, b, kv * G};
      float *dk = first.k(dqkv_) + t * g_.ld(), *dv = first.v(dqkv_) + t * g_.ld();
      std::memcpy(dk, this->dk(first) + t * HD, HD * sizeof(float));
      std::memcpy(dv, this->dv(first) + t * HD, HD * sizeof(float));
      for (long i = 1; i < G; ++i) {
        const Block blk{g_, b, kv * G + i};
        const float *pk = this->dk(blk) + t * HD, *pv = this->dv(blk) + t * HD;
        for (long c = 0; c < HD; ++c) dk[c] += pk[c], dv[c] += pv[c];
      }
    }
  }

 private:
  Geometry g_;
  float* dqkv_;
  float* partials_ = nullptr;
};

// The first row of the last query tile of T rows.
inline int last_tile(int T) { return (T - 1) / kQueryTile * kQueryTile; }

// Zeros n rows of HD floats, ld apart.
inline void zero_rows(float* p, long n, long HD, long ld) {
  for (long r = 0; r < n; ++r) std::memset(p + r * ld, 0, HD * sizeof(float));
}

// Softmax in place of a row of `width` scores of which columns [begin, end) are kept (the
// key range the query sees): returns the row's log-sum-exp and leaves its probabilities,
// zeros outside the range.
inline float softmax_row(float* p, int begin, int end, int width) {
  float* kept = p + begin;
  const int n = end - begin;
  const float m = row_max(kept, n);
  for (int j = 0; j < n; ++j) kept[j] = fast_exp(kept[j] - m);
  const float sum = row_sum(kept, n);
  const float inv = 1.f / sum;
  for (int j = 0; j < n; ++j) kept[j] *= inv;
  std::fill(p, kept, 0.f);
  std::fill(p + end, p + width, 0.f);
  return m + std::log(sum);
}

// The backward's row: scores s become probabilities P = exp(s - lse), and dP (dp) becomes
// dS = P (dP - D) scale, where D = rowdot(dout, out); zeros outside the kept columns
// [begin, end).
inline void gradient_row(float* s, float* dp, int begin, int end, int width, float lse, float D, float scale) {
  for (int j = begin; j < end; ++j) {
    s[j] = fast_exp(s[j] - lse);
    dp[j] = s[j] * (dp[j] - D) * scale;
  }
  for (int j = 0; j < begin; ++j) s[j] = dp[j] = 0.f;
  for (int j = end; j < width; ++j) s[j] = dp[j] = 0.f;
}

// The matmul=bf16 path (attention_bf16.cc): q, k, v, the probabilities and dout rounded to
// bf16, the products accumulated in f32, the softmax and its statistics in f32. Arguments
// as nfn_attention_forward/backward's, already checked.
nfn_status forward_bf16(nfn_ctx* ctx, float* out, float* lse, const float* qkv, const Geometry& g);
nfn_status backward_bf16(nfn_ctx* ctx, float* dqkv, const float* dout, const float* qkv, const float* out,
                         const float* lse, const Geometry& g);

}  // namespace nfn::cpu::attention
