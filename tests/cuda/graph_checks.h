// The graph ops (graph_begin/end/launch/free) of a GPU library, against the same ops run one
// by one on the same library: a recording replays bitwise what the ops compute, reads the
// buffers' contents at launch (not at recording), runs nothing while recording, survives
// the scratch buffer growing after it was made, and refuses what a graph cannot hold
// (allocating, synchronizing, copying host memory, first-use setup) with a message.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda/parity_harness.h"

namespace parity {

namespace graph_detail {

// Device buffers of one op sequence: embedding backward (a sort, scratch), a GELU linear
// (a GEMM and its epilogue), causal attention forward and backward (flash_mma in bf16).
struct Sequence {
  static constexpr int B = 2, T = 64, C = 128, NH = 2, V = 50, OC = 96;
  static constexpr int N = B * T;
  nfn_dtype dtype;
  size_t e;  // bytes per element
  // inputs
  void *tokens, *dout, *x, *w, *bias, *qkv, *datt;
  // outputs
  void *dwte, *dwpe, *y, *aux, *att, *lse, *dqkv;

  std::vector<std::pair<void**, size_t>> inputs() {
    return {{&tokens, N * 4}, {&dout, N * C * e}, {&x, N * C * e}, {&w, OC * C * e},
            {&bias, OC * e},  {&qkv, N * 3 * C * e}, {&datt, N * C * e}};
  }
  std::vector<std::pair<void**, size_t>> outputs() {
    return {{&dwte, V * C * e}, {&dwpe, T * C * e}, {&y, N * OC * e}, {&aux, N * OC * e},
            {&att, N * C * e},  {&lse, N * NH * 4}, {&dqkv, N * 3 * C * e}};
  }

  nfn_status issue(const Backend& b) const {
    const nfn_op_table& o = b.ops();
    nfn_ctx* ctx = b.ctx;
    nfn_status s = o.fill(ctx, dwte, dtype, 0.f, V * C);
    if (s == NFN_OK) s = o.fill(ctx, dwpe, dtype, 0.f, T * C);
    if (s == NFN_OK)
      s = o.embedding_backward(ctx, dwte, dwpe, dout, static_cast<const int32_t*>(tokens), B, T, C, dtype);
    if (s == NFN_OK)
      s = o.linear_forward(ctx, y, aux, x, w, bias, nullptr, N, C, OC, NFN_EPILOGUE_GELU, dtype);
    if (s == NFN_OK) s = o.attention_forward(ctx, att, static_cast<float*>(lse), qkv, B, T, NH, NH, C / NH, 0, dtype);
    if (s == NFN_OK)
      s = o.attention_backward(ctx, dqkv, datt, qkv, att, static_cast<const float*>(lse), B, T, NH, NH, C / NH, 0,
                               dtype);
    return s;
  }
};

// `bytes` of random values stored in `e`-byte floats (f32, or bf16).
inline std::vector<uint8_t> random_bytes(size_t bytes, size_t e, std::mt19937& rng, float scale) {
  const auto v = random_floats(bytes / e, rng, scale);
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < v.size(); ++i) {
    if (e == 4) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

using Bytes = std::vector<std::vector<uint8_t>>;

}  // namespace graph_detail

// Attention runs flash_mma in bf16 and flash in f32; the context is left at flash.
inline void check_graphs(const Backend& gpu, std::mt19937& rng) {
  using namespace graph_detail;
  const nfn_op_table& o = gpu.ops();
  nfn_ctx* ctx = gpu.ctx;
  auto refused = [&](nfn_status s, const char* what, const char* needle) {
    const std::string msg = o.ctx_last_error(ctx);
    expect(s != NFN_OK && msg.find(needle) != std::string::npos,
           std::string("graphs: ") + what + " inside a recording: status " + std::to_string(s) + " '" + msg + "'");
  };

  // A fresh context has not set up cuBLASLt: its first GEMM cannot be recorded.
  {
    nfn_ctx* fresh = nullptr;
    gpu.ok(o.ctx_create(0, &fresh), "ctx_create");
    Backend b{gpu.lib, fresh};
    std::vector<uint8_t> zeros(64 * 4, 0);
    void* m = b.upload(zeros.data(), zeros.size());
    b.ok(o.graph_begin(fresh), "graph_begin");
    const nfn_status s = o.linear_forward(fresh, m, nullptr, m, m, nullptr, nullptr, 8, 8, 8, NFN_EPILOGUE_NONE, NFN_F32);
    const std::string msg = o.ctx_last_error(fresh);
    expect(s != NFN_OK && msg.find("issue the same ops once before recording") != std::string::npos,
           "graphs: the first GEMM of a context inside a recording: '" + msg + "'");
    nfn_graph* g = nullptr;
    b.ok(o.graph_end(fresh, &g), "graph_end after a refused op");
    b.ok(o.graph_free(fresh, g), "graph_free");
    b.ok(o.free(fresh, m), "free");
    o.ctx_destroy(fresh);
  }

  for (nfn_dtype dt : {NFN_F32, NFN_BF16}) {
    const std::string tag = dt == NFN_F32 ? "f32" : "bf16";
    gpu.ok(o.ctx_configure(ctx, "attention", dt == NFN_BF16 ? "flash_mma" : "flash"), "configure attention");
    Sequence q{};
    q.dtype = dt;
    q.e = dt == NFN_F32 ? 4 : 2;
    auto make_inputs = [&] {
      Bytes in;
      for (auto [ptr, bytes] : q.inputs()) {
        if (ptr == &q.tokens) {
          std::vector<uint8_t> t(bytes);
          for (size_t i = 0; i < bytes / 4; ++i) {
            const int32_t id = static_cast<int32_t>(rng() % Sequence::V);
            std::memcpy(t.data() + 4 * i, &id, 4);
          }
          in.push_back(std::move(t));
        } else {
          in.push_back(random_bytes(bytes, q.e, rng, ptr == &q.qkv ? 1.f : 0.3f));
        }
      }
      return in;
    };
    const Bytes in1 = make_inputs(), in2 = make_inputs();
    auto set_inputs = [&](const Bytes& in) {
      size_t k = 0;
      for (auto [ptr, bytes] : q.inputs()) gpu.ok(o.copy(ctx, *ptr, in[k++].data(), bytes, NFN_HOST_TO_DEVICE), "copy");
    };
    auto poison_outputs = [&] {
      for (auto [ptr, bytes] : q.outputs()) gpu.ok(o.fill(ctx, *ptr, NFN_F32, std::nanf(""), bytes / 4), "fill");
    };
    auto read_outputs = [&] {
      Bytes out;
      for (auto [ptr, bytes] : q.outputs()) {
        out.emplace_back(bytes);
        gpu.download(out.back().data(), *ptr, bytes);
      }
      return out;
    };
    for (auto [ptr, bytes] : q.inputs()) gpu.ok(o.alloc(ctx, bytes, ptr), "alloc");
    for (auto [ptr, bytes] : q.outputs()) gpu.ok(o.alloc(ctx, bytes, ptr), "alloc");

    // One by one: the reference for each input set (and the first-use setup).
    Bytes want[2];
    for (int k = 0; k < 2; ++k) {
      set_inputs(k == 0 ? in1 : in2);
      poison_outputs();
      gpu.ok(q.issue(gpu), "graphs: the ops one by one");
      want[k] = read_outputs();
    }
    // Recorded: nothing runs while recording, so the outputs keep their poison.
    poison_outputs();
    const Bytes poisoned = read_outputs();
    nfn_graph* graph = nullptr;
    gpu.ok(o.graph_begin(ctx), "graph_begin");
    gpu.ok(q.issue(gpu), "graphs: the ops recorded");
    gpu.ok(o.graph_end(ctx, &graph), "graph_end");
    expect(read_outputs() == poisoned, "graphs " + tag + ": recording ran the ops");
    // Replayed on whatever the inputs hold at launch, in both orders.
    for (int k : {1, 0, 1}) {
      set_inputs(k == 0 ? in1 : in2);
      poison_outputs();
      gpu.ok(o.graph_launch(ctx, graph), "graph_launch");
      expect(read_outputs() == want[k], "graphs " + tag + ": a replay on input set " + std::to_string(k) +
                                            " differs bitwise from the ops run one by one");
    }
    // The scratch buffer outgrown after the recording (the LM head's logits of 64 rows over a
    // vocabulary of 65,536 in f32: 16 MiB; 32 MiB in bf16 over 262,144, to grow again)
    // stays valid for the recording.
    {
      const int rows = 64, c = 8, vocab = dt == NFN_F32 ? 1 << 16 : 1 << 18;
      std::vector<int32_t> targets(rows);
      for (int& t : targets) t = static_cast<int32_t>(rng() % vocab);
      const auto xs = random_bytes(rows * c * q.e, q.e, rng, 0.5f), wte = random_bytes(static_cast<size_t>(vocab) * c * q.e, q.e, rng, 0.5f);
      void* tg = gpu.upload(targets.data(), rows * 4);
      void* xd = gpu.upload(xs.data(), xs.size());
      void* wd = gpu.upload(wte.data(), wte.size());
      void* losses = nullptr;
      gpu.ok(o.alloc(ctx, rows * 4, &losses), "alloc");
      auto lm_head = [&] {
        return o.lm_head_cross_entropy(ctx, static_cast<float*>(losses), nullptr, nullptr, nullptr, xd, wd,
                                       static_cast<int32_t*>(tg), nullptr, rows, c, vocab, vocab, 1.f, 0.f, dt);
      };
      // Inside a recording the growth is refused; outside it is fine.
      gpu.ok(o.graph_begin(ctx), "graph_begin");
      refused(lm_head(), "scratch growth", "scratch would grow");
      nfn_graph* partial = nullptr;
      gpu.ok(o.graph_end(ctx, &partial), "graph_end");
      gpu.ok(o.graph_free(ctx, partial), "graph_free");
      gpu.ok(lm_head(), "lm_head_cross_entropy (the scratch grows)");
      set_inputs(in1);
      poison_outputs();
      gpu.ok(o.graph_launch(ctx, graph), "graph_launch after the scratch grew");
      expect(read_outputs() == want[0], "graphs " + tag + ": a replay after the scratch grew differs");
      for (void* p : {tg, xd, wd, losses}) gpu.ok(o.free(ctx, p), "free");
    }
    gpu.ok(o.graph_free(ctx, graph), "graph_free");
    for (auto [ptr, bytes] : q.inputs()) gpu.ok(o.free(ctx, *ptr), "free");
    for (auto [ptr, bytes] : q.outputs()) gpu.ok(o.free(ctx, *ptr), "free");
  }
  gpu.ok(o.ctx_configure(ctx, "attention", "flash"), "configure attention");

  // What a recording cannot hold is refused, and the recording still ends.
  void* dev = nullptr;
  gpu.ok(o.alloc(ctx, 64, &dev), "alloc");
  char host[64] = {};
  nfn_event* ev = nullptr;
  gpu.ok(o.event_create(ctx, NFN_EVENT_TIMING, &ev), "event_create");
  gpu.ok(o.graph_begin(ctx), "graph_begin");
  refused(o.graph_begin(ctx), "graph_begin", "already recording");
  void* more = nullptr;
  refused(o.alloc(ctx, 64, &more), "alloc", "inside a graph recording");
  refused(o.free(ctx, dev), "free", "inside a graph recording");
  refused(o.synchronize(ctx), "synchronize", "inside a graph recording");
  refused(o.copy(ctx, dev, host, 64, NFN_HOST_TO_DEVICE), "copy from the host", "inside a graph recording");
  refused(o.copy(ctx, host, dev, 64, NFN_DEVICE_TO_HOST), "copy to the host", "inside a graph recording");
  refused(o.event_record(ctx, ev), "event_record", "inside a graph recording");
  refused(o.event_wait(ctx, ev), "event_wait", "inside a graph recording");
  float ms = 0;
  refused(o.event_elapsed(ctx, ev, ev, &ms), "event_elapsed", "inside a graph recording");
  nfn_graph* g = nullptr;
  gpu.ok(o.graph_end(ctx, &g), "graph_end");
  gpu.ok(o.event_free(ctx, ev), "event_free");
  gpu.ok(o.graph_free(ctx, g), "graph_free");
  expect(o.graph_end(ctx, &g) != NFN_OK && g == nullptr, "graphs: graph_end without a recording is refused");
  expect(o.graph_launch(ctx, nullptr) != NFN_OK, "graphs: graph_launch of a null graph is refused");
  gpu.ok(o.free(ctx, dev), "free");
  gpu.ok(o.synchronize(ctx), "synchronize after the recordings");
}

}  // namespace parity
