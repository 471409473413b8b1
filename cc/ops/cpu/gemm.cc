// oneDNN matmul behind nfn::cpu::gemm, with primitives cached by shape on the context.
#include "cc/ops/cpu/gemm.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace nfn::cpu {

namespace {

using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

// Everything that selects a distinct primitive.
using Key = std::array<int64_t, 21>;

}  // namespace

struct GemmState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };
  std::map<Key, Entry> primitives;
  std::vector<uint16_t> a_bf16, b_bf16;  // inputs rounded to bf16 in matmul=bf16 mode
  std::vector<float> a_plain;            // a transposed A, packed row-major
};

void destroy_gemm_state(GemmState* state) { delete state; }

namespace {

GemmState* state_of(nfn_ctx* ctx) {
  if (ctx->gemm == nullptr) ctx->gemm = new GemmState();
  return ctx->gemm;
}

// A stored matrix (rows, cols) with row stride ld, seen as op(X), in a (batch0, batch1) grid.
dnnl::memory::desc matrix_desc(const int64_t* batch, const int64_t* batch_stride, int64_t rows,
                               int64_t cols, int64_t ld, bool trans, dt type) {
  Dims dims = trans ? Dims{cols, rows} : Dims{rows, cols};
  Dims strides = trans ? Dims{1, ld} : Dims{ld, 1};
  if (batch[0] * batch[1] > 1) {
    dims.insert(dims.begin(), {batch[0], batch[1]});
    strides.insert(strides.begin(), {batch_stride[0], batch_stride[1]});
  }
  return dnnl::memory::desc(dims, type, strides);
}

// Copies op(X) of a stored (rows, cols, ld) f32 matrix into a packed row-major buffer,
// transposing when `trans` (in small tiles, so both sides stay in cache), converting each
// element with `cvt` (to bf16, or as is).
template <typename Out, typename Cvt>
void pack(const float* src, int64_t rows, int64_t cols, int64_t ld, bool trans,
          std::vector<Out>* dst, Cvt cvt) {
  if (dst->size() < static_cast<size_t>(rows * cols)) dst->resize(rows * cols);
  Out* d = dst->data();
  if (!trans) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = cvt(src[r * ld + c]);
    return;
  }
  constexpr int64_t kTile = 16;  // the packed matrix is (cols, rows); 16 beats 32 and 64 here
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          d[c * rows + r] = cvt(src[r * ld + c]);
}

// Element conversions for pack (lambdas, so they inline).
constexpr auto to_bf16 = [](float v) { return f32_to_bf16(v); };
constexpr auto as_is = [](float v) { return v; };

}  // namespace

nfn_status gemm(nfn_ctx* ctx, const char* op, const Gemm& g) {
  if (g.M <= 0 || g.N <= 0) return NFN_OK;
  const bool batched = g.batch[0] * g.batch[1] > 1;
  const bool bf16 = ctx->matmul_bf16 && g.allow_bf16 && !batched;
  // oneDNN's f32 GEMM runs a transposed A at about half speed (measured on AVX2); packing
  // A row-major first costs one pass over it. bf16 mode packs A anyway.
  const bool pack_a = bf16 || (g.trans_a && !batched);
  GemmState* st = state_of(ctx);
  // Stored shapes: A is (M,K) or (K,M); B is (K,N) or (N,K).
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  const bool trans_a = g.trans_a && !pack_a;
  const int64_t lda = pack_a ? g.K : g.lda, ldb = bf16 ? b_cols : g.ldb;
  int32_t alpha_bits;
  std::memcpy(&alpha_bits, &g.alpha, 4);
  const Key key = {g.M, g.N, g.K, lda, ldb, g.ldc, trans_a, g.trans_b, g.bias != nullptr,
                   g.accumulate, alpha_bits, bf16, g.batch[0], g.batch[1], g.stride_a[0],
                   g.stride_a[1], g.stride_b[0], g.stride_b[1], g.stride_c[0], g.stride_c[1], 0};
  try {
    auto it = st->primitives.find(key);
    if (it == st->primitives.end()) {
      const dt in_type = bf16 ? dt::bf16 : dt::f32;
      auto a_md = pack_a ? matrix_desc(g.batch, g.stride_a, g.M, g.K, lda, false, in_type)
                         : matrix_desc(g.batch, g.stride_a, a_rows, a_cols, lda, trans_a, in_type);
      auto b_md = matrix_desc(g.batch, g.stride_b, b_rows, b_cols, ldb, g.trans_b, in_type);
      auto c_md = matrix_desc(g.batch, g.stride_c, g.M, g.N, g.ldc, false, dt::f32);
      dnnl::post_ops post;
      if (g.alpha != 1.f) post.append_eltwise(dnnl::algorithm::eltwise_linear, g.alpha, 0.f);
      if (g.accumulate) post.append_sum(1.f);
      dnnl::primitive_attr attr;
      attr.set_post_ops(post);
      dnnl::matmul::primitive_desc pd;
      if (g.bias != nullptr) {
        Dims bias_dims = batched ? Dims{1, 1, 1, g.N} : Dims{1, g.N};
        Dims bias_strides = batched ? Dims{g.N, g.N, g.N, 1} : Dims{g.N, 1};
        dnnl::memory::desc bias_md(bias_dims, dt::f32, bias_strides);
        pd = dnnl::matmul::primitive_desc(st->engine, a_md, b_md, bias_md, c_md, attr);
      } else {
        pd = dnnl::matmul::primitive_desc(st->engine, a_md, b_md, c_md, attr);
      }
      it = st->primitives.emplace(key, GemmState::Entry{pd, dnnl::matmul(pd)}).first;
    }
    const GemmState::Entry& e = it->second;
    void* a_ptr = const_cast<float*>(g.A);
    void* b_ptr = const_cast<float*>(g.B);
    if (bf16) {
      pack(g.A, a_rows, a_cols, g.lda, g.trans_a, &st->a_bf16, to_bf16);
      a_ptr = st->a_bf16.data();
      if (g.B_bf16 != nullptr) {
        b_ptr = const_cast<uint16_t*>(g.B_bf16);
      } else {
        pack(g.B, b_rows, b_cols, g.ldb, false, &st->b_bf16, to_bf16);
        b_ptr = st->b_bf16.data();
      }
    } else if (pack_a) {
      pack(g.A, a_rows, a_cols, g.lda, true, &st->a_plain, as_is);
      a_ptr = st->a_plain.data();
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(e.pd.src_desc(), st->engine, a_ptr)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(e.pd.weights_desc(), st->engine, b_ptr)},
        {DNNL_ARG_DST, dnnl::memory(e.pd.dst_desc(), st->engine, g.C)}};
    if (g.bias != nullptr)
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory(e.pd.bias_desc(), st->engine, const_cast<float*>(g.bias)));
    e.prim.execute(st->stream, args);
    st->stream.wait();
  } catch (const dnnl::error& err) {
    return fail(ctx, NFN_ERR_BACKEND, "%s: oneDNN matmul %lldx%lldx%lld failed: %s", op,
                static_cast<long long>(g.M), static_cast<long long>(g.N),
                static_cast<long long>(g.K), err.what());
  }
  return NFN_OK;
}

bool bf16_gemm_supported(nfn_ctx* ctx) {
  GemmState* st = state_of(ctx);
  try {
    auto md = dnnl::memory::desc({16, 16}, dt::bf16, dnnl::memory::format_tag::ab);
    auto out = dnnl::memory::desc({16, 16}, dt::f32, dnnl::memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(st->engine, md, md, out);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace nfn::cpu
