// bf16 products (matmul=bf16) through oneDNN's matmul: the inputs are rounded to bf16 and
// packed row-major, the products accumulate in f32. Primitives are created once per shape
// and cached on the context, because creating one costs far more than running a small one.
// The same code runs with f32 operands (gemm_onednn(..., bf16=false)), so its packing,
// descriptors and cache are tested on CPUs that have no bf16 matmul.
#include <array>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/pack.h"

namespace nfn::cpu {

namespace {

using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

// Everything that selects a distinct primitive: operand type, M, N, K, ldc, trans_a (the row
// stride of packed A), trans_b (B's packed layout), bias, accumulate, alpha. A is always
// packed (M,K), so lda selects nothing.
using Key = std::array<int64_t, 10>;

// gemm_bf16_serial's shapes: M, N, K, lda, ldb, trans_b, ldc, alpha, accumulate.
using SerialKey = std::array<int64_t, 9>;

int32_t bits_of(float f) {
  int32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// alpha and accumulate as post-ops: C = alpha * product (+ C).
dnnl::primitive_attr product_attr(float alpha, bool accumulate) {
  dnnl::post_ops post;
  if (alpha != 1.f) post.append_eltwise(dnnl::algorithm::eltwise_linear, alpha, 0.f);
  if (accumulate) post.append_sum(1.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post);
  return attr;
}

}  // namespace

struct GemmState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };
  std::map<Key, Entry> primitives;
  std::vector<uint16_t> a_bf16, b_bf16;  // op(A) and B rounded to bf16, packed
  std::vector<float> a_f32, b_f32;       // the same in f32 (bf16=false)
  // gemm_bf16_serial: one-thread primitives, and each thread's stream and scratchpad (user
  // scratchpads, so that two threads running one primitive never share one).
  struct SerialEntry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // Each thread's arguments, made once (making dnnl::memory objects costs a few
    // allocations, as much as a small product): a call only sets their pointers.
    std::vector<std::unordered_map<int, dnnl::memory>> args;
  };
  std::map<SerialKey, SerialEntry> serial;
  std::vector<dnnl::stream> thread_streams;
  std::vector<std::vector<uint8_t>> thread_scratch;
};

void destroy_gemm_state(GemmState* state) { delete state; }

namespace {

GemmState* state_of(nfn_ctx* ctx) {
  if (ctx->gemm == nullptr) ctx->gemm = new GemmState();
  return ctx->gemm;
}

}  // namespace

nfn_status gemm_onednn(nfn_ctx* ctx, const char* op, const Gemm& g, bool bf16) {
  GemmState* st = state_of(ctx);
  // Stored shapes: A is (M,K) or (K,M); B is (K,N) or (N,K). Both are packed: op(A) as
  // (M,K) (its rows padded when transposed), B as stored, so only B's transposition reaches
  // the primitive.
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  const Key key = {bf16, g.M, g.N, g.K, g.ldc, g.trans_a, g.trans_b, g.bias != nullptr, g.accumulate, bits_of(g.alpha)};
  const dt in = bf16 ? dt::bf16 : dt::f32;
  try {
    auto it = st->primitives.find(key);
    if (it == st->primitives.end()) {
      dnnl::memory::desc a_md({g.M, g.K}, in, Dims{packed_ld(a_rows, a_cols, g.trans_a), 1});
      dnnl::memory::desc b_md({g.K, g.N}, in, g.trans_b ? Dims{1, b_cols} : Dims{b_cols, 1});
      dnnl::memory::desc c_md({g.M, g.N}, dt::f32, Dims{g.ldc, 1});
      const dnnl::primitive_attr attr = product_attr(g.alpha, g.accumulate);
      dnnl::matmul::primitive_desc pd =
          g.bias != nullptr
              ? dnnl::matmul::primitive_desc(st->engine, a_md, b_md,
                                             dnnl::memory::desc({1, g.N}, dt::f32, Dims{g.N, 1}),
                                             c_md, attr)
              : dnnl::matmul::primitive_desc(st->engine, a_md, b_md, c_md, attr);
      it = st->primitives.emplace(key, GemmState::Entry{pd, dnnl::matmul(pd)}).first;
    }
    const GemmState::Entry& e = it->second;
    void *a, *b;
    if (bf16) {
      a = pack(g.A, a_rows, a_cols, g.lda, g.trans_a, &st->a_bf16);
      b = g.B_bf16 != nullptr ? const_cast<uint16_t*>(g.B_bf16)
                              : pack(g.B, b_rows, b_cols, g.ldb, false, &st->b_bf16);
    } else {
      a = pack(g.A, a_rows, a_cols, g.lda, g.trans_a, &st->a_f32);
      b = pack(g.B, b_rows, b_cols, g.ldb, false, &st->b_f32);
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(e.pd.src_desc(), st->engine, a)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(e.pd.weights_desc(), st->engine, b)},
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

namespace {

// OpenMP's thread count 1 on this thread while it lives (thrown through too), then back.
struct OneThread {
  const int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

SerialKey serial_key(const GemmBf16& g) {
  return {g.M, g.N, g.K, g.lda, g.ldb, g.trans_b, g.ldc, bits_of(g.alpha), g.accumulate};
}

}  // namespace

nfn_status prepare_gemm_bf16_serial(nfn_ctx* ctx, const char* op, const GemmBf16& g, int threads) {
  GemmState* st = state_of(ctx);
  try {
    while (static_cast<int>(st->thread_streams.size()) < threads) {
      st->thread_streams.emplace_back(st->engine);
      st->thread_scratch.emplace_back();
    }
    auto it = st->serial.find(serial_key(g));
    if (it == st->serial.end()) {
      dnnl::memory::desc a_md({g.M, g.K}, dt::bf16, Dims{g.lda, 1});
      dnnl::memory::desc b_md({g.K, g.N}, dt::bf16, g.trans_b ? Dims{1, g.ldb} : Dims{g.ldb, 1});
      dnnl::memory::desc c_md({g.M, g.N}, dt::f32, Dims{g.ldc, 1});
      dnnl::primitive_attr attr = product_attr(g.alpha, g.accumulate);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      // oneDNN plans a primitive's work for the threads it sees when it is made; these run
      // on one thread each, inside the op's parallel region.
      const OneThread one;
      dnnl::matmul::primitive_desc pd(st->engine, a_md, b_md, c_md, attr);
      it = st->serial.emplace(serial_key(g), GemmState::SerialEntry{pd, dnnl::matmul(pd), {}}).first;
    }
    GemmState::SerialEntry& e = it->second;
    const size_t scratch = e.pd.scratchpad_desc().get_size();
    for (std::vector<uint8_t>& s : st->thread_scratch)
      if (s.size() < scratch) s.resize(scratch);
    while (e.args.size() < st->thread_streams.size())
      e.args.push_back({{DNNL_ARG_SRC, dnnl::memory(e.pd.src_desc(), st->engine, nullptr)},
                        {DNNL_ARG_WEIGHTS, dnnl::memory(e.pd.weights_desc(), st->engine, nullptr)},
                        {DNNL_ARG_DST, dnnl::memory(e.pd.dst_desc(), st->engine, nullptr)},
                        {DNNL_ARG_SCRATCHPAD, dnnl::memory(e.pd.scratchpad_desc(), st->engine, nullptr)}});
  } catch (const dnnl::error& err) {
    return fail(ctx, NFN_ERR_BACKEND, "%s: oneDNN bf16 matmul %lldx%lldx%lld (one thread) failed: %s", op,
                static_cast<long long>(g.M), static_cast<long long>(g.N), static_cast<long long>(g.K), err.what());
  }
  return NFN_OK;
}

bool gemm_bf16_serial(nfn_ctx* ctx, const GemmBf16& g, int thread) {
  GemmState* st = ctx->gemm;
  auto it = st->serial.find(serial_key(g));  // only looked up here: prepared beforehand
  if (it == st->serial.end() || thread >= static_cast<int>(it->second.args.size())) return false;
  std::unordered_map<int, dnnl::memory>& args = it->second.args[thread];
  try {
    args.at(DNNL_ARG_SRC).set_data_handle(const_cast<uint16_t*>(g.A));
    args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<uint16_t*>(g.B));
    args.at(DNNL_ARG_DST).set_data_handle(g.C);
    args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(st->thread_scratch[thread].data());
    it->second.prim.execute(st->thread_streams[thread], args);
    st->thread_streams[thread].wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
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
