// Micro-benchmark of an op library (CPU or CUDA, opened like the trainer opens it): the
// median time of each op at a training geometry, how often one micro-step calls it, and the
// op time of a whole micro-step. Not a test.
//
//   bazel run -c opt //tools:bench_ops -- [--lib PATH] [--geometry tiny|small|demo|gpt2] [--batch N]
//       [--dtype f32|bf16] [--configure KEY=VALUE]... [--reps N] [--cpu-time] [--only TEXT]
//       [--lm-head-rows R,R,...]
//
// `bazel run` passes the CPU library as --lib (a later --lib wins). --geometry small (the CPU
// trainer benchmark's: 4 layers, 4 heads, 256 channels, seq 256, micro-batch 8, vocab 8192) is
// the default, demo the `nfn train` demo's (4 layers, 4 heads, 128 channels, seq 128,
// micro-batch 16, vocab 1024), gpt2 is GPT-2 124M at seq 1024, micro-batch 16 (the GPU
// benchmark's), tiny a 1-layer model that checks the tool itself (on the CUDA emulator, say).
// --dtype is the storage dtype (bf16 needs a backend that stores bf16: CUDA). --configure passes a context option, e.g.
// threads=1 or matmul=bf16 (CPU), attention=flash_mma (CUDA). Each sample times enough
// back-to-back calls to fill a millisecond, then synchronizes, so launch-bound GPU ops are
// timed as a trainer runs them. --cpu-time measures the process's CPU time (CPU library
// with threads=1: the op's own work, unaffected by other processes). --only times just the
// ops whose names contain TEXT. --lm-head-rows also times the LM head with each of these rows
// per chunk (the CUDA library's lm_head_rows option), as extra rows outside the step total.
// "embedding_backward (text-like ids)" (outside the step total too) runs the embedding
// backward on Zipf-distributed ids, whose frequent ids repeat as real text's do.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cc/ops/op_library.h"
#include "cc/util/bf16.h"

namespace {

struct Row {
  std::string name;
  int per_step;
  double median_ms;
  double min_ms;
  double gflop;  // per call, 0 when not a GEMM-bound op
};

struct Geometry {
  int L, NH, C, T, B, vocab, V, calibration;  // V: vocab padded (wte's rows); calibration: the square GEMM's side
};

bool use_cpu_time = false;

double now_ms() {
  if (use_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_ops: %s\n", msg.c_str());
  std::exit(1);
}

// Device buffers of the op library, filled from the host in the storage dtype.
class Buffers {
 public:
  Buffers(const nfn_op_table& ops, nfn_ctx* ctx, nfn_dtype dtype) : ops_(ops), ctx_(ctx), dtype_(dtype) {}
  ~Buffers() { release(); }
  void release() {
    for (void* p : owned_) ops_.free(ctx_, p);
    owned_.clear();
  }
  void check(nfn_status s, const char* what) const {
    if (s != NFN_OK) die(std::string(what) + ": " + ops_.ctx_last_error(ctx_));
  }
  // n values of standard deviation `scale` (uniform, from splitmix64: GPT-2's geometry needs
  // half a billion, which a normal distribution takes tens of seconds to draw) in the
  // storage dtype (f32 when `f32`).
  void* random(size_t n, uint64_t seed, float scale, bool f32 = false) {
    float* v = staging(n);
    uint64_t z = seed * 0x9E3779B97F4A7C15ull;
    const float half_width = scale * 1.7320508f;  // uniform on [-a, a] has deviation a / sqrt(3)
    for (size_t i = 0; i < n; ++i) {
      z += 0x9E3779B97F4A7C15ull;
      uint64_t r = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
      r ^= r >> 31;
      v[i] = (static_cast<float>(r >> 40) * 0x1p-23f - 1.f) * half_width;
    }
    return upload(v, n, f32);
  }
  void* zeros(size_t n, bool f32 = false) {
    float* v = staging(n);
    std::fill(v, v + n, 0.f);
    return upload(v, n, f32);
  }
  void* upload(const float* v, size_t n, bool f32) {
    if (f32 || dtype_ == NFN_F32) return put(v, n * 4);
    if (staging16_.size() < n) staging16_.resize(n);
    for (size_t i = 0; i < n; ++i) staging16_[i] = nfn::f32_to_bf16(v[i]);
    return put(staging16_.data(), n * 2);
  }
  void* put(const void* host, size_t bytes) {
    void* p = nullptr;
    check(ops_.alloc(ctx_, bytes, &p), "alloc");
    owned_.push_back(p);
    check(ops_.copy(ctx_, p, host, bytes, NFN_HOST_TO_DEVICE), "upload");
    check(ops_.synchronize(ctx_), "upload");  // the staging buffer is reused next
    return p;
  }

 private:
  const nfn_op_table& ops_;
  nfn_ctx* ctx_;
  nfn_dtype dtype_;
  std::vector<void*> owned_;
  std::vector<float> staging_;       // host values on their way up, reused (GPT-2's are 200 MB)
  std::vector<uint16_t> staging16_;  // the same as bf16

  float* staging(size_t n) {
    if (staging_.size() < n) staging_.resize(n);
    return staging_.data();
  }
};

// Median and minimum of `reps` samples. A sample is `inner` back-to-back calls and one
// synchronization, divided by `inner`, with `inner` chosen so a sample lasts about 1 ms.
std::pair<double, double> time_ms(const nfn_op_table& ops, nfn_ctx* ctx, const std::function<nfn_status()>& op,
                                  int reps) {
  auto sample = [&](int inner) {
    const double start = now_ms();
    for (int i = 0; i < inner; ++i)
      if (op() != NFN_OK) die(ops.ctx_last_error(ctx));
    if (ops.synchronize(ctx) != NFN_OK) die(ops.ctx_last_error(ctx));
    return (now_ms() - start) / inner;
  };
  sample(1);  // the first call creates primitives, handles and touches memory
  const double once = sample(1);
  const int inner = once >= 1.0 ? 1 : static_cast<int>(std::min(1000.0, std::ceil(1.0 / std::max(once, 1e-3))));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(sample(inner));
  std::sort(t.begin(), t.end());
  const size_t mid = t.size() / 2;  // the median: the middle sample, or the mean of the two middle ones
  return {t.size() % 2 ? t[mid] : (t[mid - 1] + t[mid]) / 2, t.front()};
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_ops [--lib PATH] [--geometry tiny|small|demo|gpt2] [--batch N] [--dtype f32|bf16] "
               "[--configure KEY=VALUE]... [--reps N] [--cpu-time] [--only TEXT] [--lm-head-rows R,R,...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, batch = 0;
  std::string lib_path, geometry = "small";
  nfn_dtype dtype = NFN_F32;
  std::vector<std::pair<std::string, std::string>> options;
  const char* only = nullptr;
  std::vector<std::string> lm_head_rows;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--lib") && more) lib_path = argv[++i];
    else if (!std::strcmp(argv[i], "--geometry") && more) geometry = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && more) batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && more) {
      const std::string d = argv[++i];
      if (d != "f32" && d != "bf16") return usage();
      dtype = d == "bf16" ? NFN_BF16 : NFN_F32;
    } else if (!std::strcmp(argv[i], "--configure") && more) {
      const std::string kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) return usage();
      options.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (!std::strcmp(argv[i], "--reps") && more) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--cpu-time")) use_cpu_time = true;
    else if (!std::strcmp(argv[i], "--only") && more) only = argv[++i];
    else if (!std::strcmp(argv[i], "--lm-head-rows") && more) {
      const std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        lm_head_rows.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else return usage();
  }
  Geometry g;
  if (geometry == "tiny") g = {1, 2, 128, 64, 2, 512, 512, 256};
  else if (geometry == "small") g = {4, 4, 256, 256, 8, 8192, 8192, 2048};
  else if (geometry == "demo") g = {4, 4, 128, 128, 16, 1024, 1024, 2048};
  else if (geometry == "gpt2") g = {12, 12, 768, 1024, 16, 50257, 50304, 8192};
  else return usage();
  if (batch > 0) g.B = batch;
  if (lib_path.empty()) die("no --lib given (bazel run //tools:bench_ops passes the CPU library)");
  nfn::OpLibrary lib;
  std::string error;
  if (!nfn::load_op_library(lib_path, &lib, &error)) die(error);
  const nfn_op_table& o = lib.ops;
  nfn_ctx* ctx = nullptr;
  if (o.ctx_create(0, &ctx) != NFN_OK) die(lib_path + ": " + o.ctx_last_error(nullptr));
  for (const auto& [key, value] : options)
    if (o.ctx_configure(ctx, key.c_str(), value.c_str()) != NFN_OK) die(o.ctx_last_error(ctx));

  const int L = g.L, NH = g.NH, C = g.C, T = g.T, B = g.B, V = g.V, N = B * T;
  const size_t NC4 = size_t(N) * 4 * C;
  Buffers buf(o, ctx, dtype);
  void *x = buf.random(NC4, 1, 1.f), *y = buf.random(NC4, 2, 1.f), *pre = buf.random(NC4, 3, 1.f);
  void* dy = buf.random(NC4, 4, 1.f);
  void *w = buf.random(size_t(4) * C * C, 5, 0.02f), *dw = buf.zeros(size_t(4) * C * C);
  void *b = buf.random(4 * C, 6, 0.02f), *db = buf.zeros(4 * C), *dcol = buf.zeros(4 * C);
  void *wte = buf.random(size_t(V) * C, 7, 0.02f), *dwte = buf.zeros(size_t(V) * C);
  void *qkv = buf.random(size_t(N) * 3 * C, 8, 1.f), *dqkv = buf.zeros(size_t(N) * 3 * C);
  auto* stats = static_cast<float*>(buf.zeros(size_t(N) * 4, true));
  auto* lse = static_cast<float*>(buf.zeros(size_t(B) * NH * T, true));
  auto* losses = static_cast<float*>(buf.zeros(N, true));
  const float one = 1.f;
  auto* sumsq = static_cast<float*>(buf.put(&one, 4));
  std::vector<int32_t> host_tokens(N);
  for (int i = 0; i < N; ++i) host_tokens[i] = static_cast<int32_t>((i * 2654435761u) % g.vocab);
  auto* tokens = static_cast<int32_t*>(buf.put(host_tokens.data(), host_tokens.size() * 4));
  // Text-like ids: rank r drawn with probability proportional to 1 / (r + 1) (Zipf), so the
  // commonest id is about 9% of a micro-batch at vocab 50,257 (" the" is about 4% of web
  // text): what the embedding backward meets in real training, unlike the ids above.
  std::vector<double> zipf_cdf(g.vocab);
  for (int r = 0; r < g.vocab; ++r) zipf_cdf[r] = (r ? zipf_cdf[r - 1] : 0) + 1.0 / (r + 1);
  std::mt19937 zipf_rng(20240520);
  std::vector<int32_t> text_tokens(N);
  for (int i = 0; i < N; ++i) {
    const double u = std::uniform_real_distribution<double>(0, zipf_cdf.back())(zipf_rng);
    text_tokens[i] = static_cast<int32_t>(std::lower_bound(zipf_cdf.begin(), zipf_cdf.end(), u) - zipf_cdf.begin());
  }
  auto* text_ids = static_cast<int32_t*>(buf.put(text_tokens.data(), text_tokens.size() * 4));
  const size_t params = size_t(V) * C + size_t(T) * C + size_t(L) * (12 * C * C + 13 * C) + 2 * C;
  auto* master = static_cast<float*>(buf.random(params, 9, 0.02f, true));
  void* weights = dtype == NFN_F32 ? nullptr : buf.zeros(params);  // bf16 storage: the AdamW copy
  void* grad = buf.random(params, 10, 1e-3f);
  auto* m = static_cast<float*>(buf.zeros(params, true));
  auto* v = static_cast<float*>(buf.zeros(params, true));

  // gelu: fc's GELU epilogue; residual: the projections', which add onto the residual stream.
  auto linear = [&](int IC, int OC, bool gelu, bool residual) {
    return [&, IC, OC, gelu, residual] {
      return o.linear_forward(ctx, y, gelu ? pre : nullptr, x, w, b, residual ? dy : nullptr, N, IC, OC,
                              gelu ? NFN_EPILOGUE_GELU : NFN_EPILOGUE_NONE, dtype);
    };
  };
  // As the model calls each: qkv sums its own bias gradient; the projections' come from the
  // norm backwards (dinp_colsum), fc's from fcproj's backward through the GELU (gelu).
  auto linear_back = [&](int IC, int OC, bool own_bias, bool gelu) {
    return [&, IC, OC, own_bias, gelu] {
      return o.linear_backward(ctx, y, dw, own_bias ? db : nullptr, gelu ? dcol : nullptr, dy, x, w,
                               gelu ? pre : nullptr, N, IC, OC, 0, dtype);
    };
  };
  auto gf = [](double mm, double nn, double kk) { return 2.0 * mm * nn * kk * 1e-9; };
  // Causal attention: about half of the T*T score matrix is computed.
  const double attn_gf = 2.0 * B * NH * (2.0 * T * T / 2 * (C / NH)) * 1e-9;
  std::vector<Row> rows;
  auto add = [&](const std::string& name, int per_step, std::function<nfn_status()> op, double gflop) {
    if (only && name.find(only) == std::string::npos) return;
    const auto [median, min] = time_ms(o, ctx, op, reps);
    rows.push_back({name, per_step, median, min, gflop});
  };
  const std::string c1 = std::to_string(C), c3 = std::to_string(3 * C), c4 = std::to_string(4 * C);
  add("embedding_forward", 1, [&] { return o.embedding_forward(ctx, y, tokens, wte, w, B, T, C, dtype); }, 0);
  add("embedding_backward", 1, [&] { return o.embedding_backward(ctx, dwte, dw, dy, tokens, B, T, C, dtype); }, 0);
  add("embedding_backward (text-like ids)", 0,  // outside the step total
      [&] { return o.embedding_backward(ctx, dwte, dw, dy, text_ids, B, T, C, dtype); }, 0);
  add("layernorm_forward", 2 * L + 1, [&] { return o.layernorm_forward(ctx, y, stats, stats + N, x, w, b, N, C, dtype); }, 0);
  // The first layer's ln1 has no projection below it; every other norm backward sums the
  // projection's bias gradient (dinp_colsum).
  add("layernorm_backward", 1, [&] { return o.layernorm_backward(ctx, y, dw, db, nullptr, dy, x, w, stats, stats + N, N, C, dtype); }, 0);
  add("layernorm_backward +dinp_colsum", 2 * L,
      [&] { return o.layernorm_backward(ctx, y, dw, db, dcol, dy, x, w, stats, stats + N, N, C, dtype); }, 0);
  add("linear_forward qkv " + c1 + "->" + c3, L, linear(C, 3 * C, false, false), gf(N, 3 * C, C));
  add("linear_forward proj+residual " + c1 + "->" + c1, L, linear(C, C, false, true), gf(N, C, C));
  add("linear_forward fc+gelu " + c1 + "->" + c4, L, linear(C, 4 * C, true, false), gf(N, 4 * C, C));
  add("linear_forward fcproj+residual " + c4 + "->" + c1, L, linear(4 * C, C, false, true), gf(N, C, 4 * C));
  add("linear_backward qkv", L, linear_back(C, 3 * C, true, false), 2 * gf(N, 3 * C, C));
  add("linear_backward proj", L, linear_back(C, C, false, false), 2 * gf(N, C, C));
  add("linear_backward fc", L, linear_back(C, 4 * C, false, false), 2 * gf(N, 4 * C, C));
  add("linear_backward fcproj+gelu", L, linear_back(4 * C, C, false, true), 2 * gf(N, C, 4 * C));
  // Each backward's products alone, outside the step total: the input gradient, the weight
  // gradient, and the weight gradient with the bias gradient (our column sums of dout).
  for (const auto& [name, IC, OC, gelu] : {std::tuple{"qkv", C, 3 * C, false}, std::tuple{"proj", C, C, false},
                                          std::tuple{"fc", C, 4 * C, false}, std::tuple{"fcproj+gelu", 4 * C, C, true}}) {
    const std::string at = std::string("linear_backward ") + name;
    add(at + ": dinp", 0, [&, IC, OC, gelu] {
      return o.linear_backward(ctx, y, nullptr, nullptr, nullptr, dy, x, w, gelu ? pre : nullptr, N, IC, OC, 0, dtype);
    }, gf(N, OC, IC));
    add(at + ": dweight", 0, [&, IC, OC] {
      return o.linear_backward(ctx, nullptr, dw, nullptr, nullptr, dy, x, w, nullptr, N, IC, OC, 0, dtype);
    }, gf(N, OC, IC));
    add(at + ": dweight+dbias", 0, [&, IC, OC] {
      return o.linear_backward(ctx, nullptr, dw, db, nullptr, dy, x, w, nullptr, N, IC, OC, 0, dtype);
    }, gf(N, OC, IC));
  }
  add("attention_forward", L, [&] { return o.attention_forward(ctx, y, lse, qkv, B, T, C, NH, dtype); }, attn_gf);
  add("attention_backward", L, [&] { return o.attention_backward(ctx, dqkv, dy, qkv, y, lse, B, T, C, NH, dtype); }, 2 * attn_gf);
  auto lm_head = [&] { return o.lm_head_cross_entropy(ctx, losses, sumsq, x, dwte, y, wte, tokens, N, C, g.vocab, V, 1.f / N, dtype); };
  add("lm_head_cross_entropy (+backward)", 1, lm_head, 3 * gf(N, V, C));
  for (const std::string& r : lm_head_rows) {  // other chunk sizes, outside the step total
    if (o.ctx_configure(ctx, "lm_head_rows", r.c_str()) != NFN_OK) die(o.ctx_last_error(ctx));
    add("lm_head_cross_entropy rows=" + r, 0, lm_head, 3 * gf(N, V, C));
  }
  const void* bufs[1] = {grad};
  size_t counts[1] = {params};
  add("sum_squares_many", 1, [&] { return o.sum_squares_many(ctx, bufs, counts, 1, dtype, sumsq); }, 0);
  nfn_adamw_group group = {master, weights, grad, m, v, params, 0.1f};
  int step = 0;
  add("adamw_step_many", 1, [&] { return o.adamw_step_many(ctx, &group, 1, ++step, 1e-4f, 0.9f, 0.95f, 1e-8f, sumsq, 1.f, dtype); }, 0);

  // Not part of a step: the library's GEMM rate on a large square product, for comparison.
  {
    const int S = g.calibration;
    void *a = buf.random(size_t(S) * S, 11, 1.f), *w2 = buf.random(size_t(S) * S, 12, 1.f);
    void* c = buf.zeros(size_t(S) * S);
    const std::string side = std::to_string(S);
    add("calibration: linear " + side + "^3", 0,
        [&] { return o.linear_forward(ctx, c, nullptr, a, w2, nullptr, nullptr, S, S, S, NFN_EPILOGUE_NONE, dtype); },
        gf(S, S, S));
  }
  if (rows.empty()) die(std::string("no op name contains '") + (only ? only : "") + "'");
  double total = 0;
  std::printf("%s (%s), %s storage, geometry %s: L%d NH%d C%d T%d B%d V%d\n", o.backend_name(), lib_path.c_str(),
              dtype == NFN_BF16 ? "bf16" : "f32", geometry.c_str(), L, NH, C, T, B, V);
  std::printf("%-36s %6s %10s %8s %8s %10s\n", "op", "calls", "median ms", "min ms", "GFLOP/s", "ms/step");
  for (const Row& r : rows) {
    total += r.per_step * r.median_ms;
    char rate[32] = "";
    if (r.gflop > 0) std::snprintf(rate, sizeof rate, "%.0f", r.gflop / (r.median_ms * 1e-3));
    std::printf("%-36s %6d %10.3f %8.3f %8s %10.2f\n", r.name.c_str(), r.per_step, r.median_ms, r.min_ms, rate,
                r.per_step * r.median_ms);
  }
  // The CUDA library's count of fused cuBLASLt epilogues (a key the CPU library does not know).
  if (const char* fused = o.ctx_query(ctx, "fused_epilogues"))
    std::printf("fused epilogues: %s\n", *fused ? fused : "none tried");
  std::printf("ops per micro-step: %.2f ms -> at most %.0f tokens/s (%d tokens per micro-step)\n", total,
              N / (total * 1e-3), N);
  buf.release();
  o.ctx_destroy(ctx);
  return 0;
}
