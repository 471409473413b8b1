// Micro-benchmark of the CPU op library at the trainer benchmark's geometry (4 layers,
// 4 heads, 256 channels, seq 256, micro-batch 8, vocab 8192): median time of each op, how
// often one training step calls it, and the op time of a whole step. Not a test.
//
//   bazel run -c opt //tools:bench_ops -- [--bf16] [--reps N] [--threads N] [--cpu-time] [--only TEXT]
//
// --cpu-time measures the process's CPU time instead of wall time: with --threads 1 it is
// the op's own work, unaffected by other processes sharing the cores. --only times just the
// ops whose names contain TEXT.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

namespace {

struct Row {
  std::string name;
  int per_step;
  double median_ms;
  double min_ms;
  double gflop;  // per call, 0 when not a GEMM-bound op
};

std::vector<float> random_vec(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool use_cpu_time = false;

double now_ms() {
  if (use_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median and minimum of `reps` timed calls: on a shared machine the minimum is the closest to
// the op's own cost, the median to what a run sees.
std::pair<double, double> time_ms(const std::function<nfn_status()>& op, int reps, nfn_ctx* ctx) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const double start = now_ms();
    if (op() != NFN_OK) {
      std::fprintf(stderr, "bench_ops: %s\n", nfn_ctx_last_error(ctx));
      std::exit(1);
    }
    const double ms = now_ms() - start;
    if (r > 0) t.push_back(ms);  // the first call creates primitives and touches memory
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool bf16 = false;
  const char* threads = nullptr;
  const char* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bf16")) bf16 = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = argv[++i];
    else if (!std::strcmp(argv[i], "--cpu-time")) use_cpu_time = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_ops [--bf16] [--reps N] [--threads N] [--cpu-time] [--only TEXT]\n");
      return 2;
    }
  }
  const int L = 4, NH = 4, C = 256, T = 256, B = 8, V = 8192, N = B * T;
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  if (threads && nfn_ctx_configure(ctx, "threads", threads) != NFN_OK) {
    std::fprintf(stderr, "bench_ops: %s\n", nfn_ctx_last_error(ctx));
    return 1;
  }
  if (bf16 && nfn_ctx_configure(ctx, "matmul", "bf16") != NFN_OK) {
    std::fprintf(stderr, "bench_ops: %s\n", nfn_ctx_last_error(ctx));
    return 1;
  }
  auto x = random_vec(size_t(N) * 4 * C, 1, 1.f), y = random_vec(size_t(N) * 4 * C, 2, 1.f);
  auto pre = random_vec(size_t(N) * 4 * C, 3, 1.f), dy = random_vec(size_t(N) * 4 * C, 4, 1.f);
  auto w = random_vec(size_t(4) * C * C, 5, 0.02f), dw = std::vector<float>(size_t(4) * C * C);
  auto b = random_vec(4 * C, 6, 0.02f), db = std::vector<float>(4 * C);
  auto wte = random_vec(size_t(V) * C, 7, 0.02f), dwte = std::vector<float>(size_t(V) * C);
  auto qkv = random_vec(size_t(N) * 3 * C, 8, 1.f), dqkv = std::vector<float>(size_t(N) * 3 * C);
  std::vector<float> stats(N * 4), lse(size_t(B) * NH * T), losses(N);
  std::vector<int32_t> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 2654435761u) % V;
  const size_t params = size_t(V) * C + size_t(T) * C + size_t(L) * (12 * C * C + 13 * C) + 2 * C;
  std::vector<float> master = random_vec(params, 9, 0.02f), grad = random_vec(params, 10, 1e-3f);
  std::vector<float> m(params), v(params);
  float sumsq = 1.f;

  auto linear = [&](int IC, int OC, bool gelu) {
    return [&, IC, OC, gelu] {
      return nfn_linear_forward(ctx, y.data(), gelu ? pre.data() : nullptr, x.data(), w.data(), b.data(), N, IC,
                                OC, gelu ? NFN_EPILOGUE_GELU : NFN_EPILOGUE_NONE, NFN_F32);
    };
  };
  auto linear_back = [&](int IC, int OC) {
    return [&, IC, OC] {
      return nfn_linear_backward(ctx, y.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC, OC, 0,
                                 NFN_F32);
    };
  };
  auto gf = [&](double m, double n, double k) { return 2.0 * m * n * k * 1e-9; };
  // Causal attention: about half of the T*T score matrix is computed.
  const double attn_gf = 2.0 * B * NH * (2.0 * T * T / 2 * (C / NH)) * 1e-9;
  std::vector<Row> rows;
  auto add = [&](const char* name, int per_step, std::function<nfn_status()> op, double gflop) {
    if (only && !std::strstr(name, only)) return;
    const auto [median, min] = time_ms(op, reps, ctx);
    rows.push_back({name, per_step, median, min, gflop});
  };
  add("embedding_forward", 1, [&] { return nfn_embedding_forward(ctx, y.data(), tokens.data(), wte.data(), w.data(), B, T, C, NFN_F32); }, 0);
  add("embedding_backward", 1, [&] { return nfn_embedding_backward(ctx, dwte.data(), dw.data(), dy.data(), tokens.data(), B, T, C, NFN_F32); }, 0);
  add("layernorm_forward", 2 * L + 1, [&] { return nfn_layernorm_forward(ctx, y.data(), stats.data(), stats.data() + N, x.data(), w.data(), b.data(), N, C, NFN_F32); }, 0);
  add("layernorm_backward", 2 * L + 1, [&] { return nfn_layernorm_backward(ctx, y.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), stats.data(), stats.data() + N, N, C, NFN_F32); }, 0);
  add("linear_forward qkv 256->768", L, linear(C, 3 * C, false), gf(N, 3 * C, C));
  add("linear_forward proj 256->256", L, linear(C, C, false), gf(N, C, C));
  add("linear_forward fc+gelu 256->1024", L, linear(C, 4 * C, true), gf(N, 4 * C, C));
  add("linear_forward fcproj 1024->256", L, linear(4 * C, C, false), gf(N, C, 4 * C));
  add("linear_backward qkv", L, linear_back(C, 3 * C), 2 * gf(N, 3 * C, C));
  add("linear_backward proj", L, linear_back(C, C), 2 * gf(N, C, C));
  add("linear_backward fc", L, linear_back(C, 4 * C), 2 * gf(N, 4 * C, C));
  add("linear_backward fcproj", L, linear_back(4 * C, C), 2 * gf(N, C, 4 * C));
  add("gelu_backward", L, [&] { return nfn_gelu_backward(ctx, y.data(), pre.data(), dy.data(), size_t(N) * 4 * C, NFN_F32); }, 0);
  add("residual_forward", 2 * L, [&] { return nfn_residual_forward(ctx, y.data(), x.data(), dy.data(), b.data(), N, C, NFN_F32); }, 0);
  add("attention_forward", L, [&] { return nfn_attention_forward(ctx, y.data(), lse.data(), qkv.data(), B, T, C, NH, NFN_F32); }, attn_gf);
  add("attention_backward", L, [&] { return nfn_attention_backward(ctx, dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), B, T, C, NH, NFN_F32); }, 2 * attn_gf);
  add("lm_head_cross_entropy (+backward)", 1, [&] { return nfn_lm_head_cross_entropy(ctx, losses.data(), &sumsq, x.data(), dwte.data(), y.data(), wte.data(), tokens.data(), N, C, V, 1.f / N, NFN_F32); }, 3 * gf(N, V, C));
  const void* bufs[1] = {grad.data()};
  size_t counts[1] = {params};
  add("sum_squares_many", 1, [&] { return nfn_sum_squares_many(ctx, bufs, counts, 1, NFN_F32, &sumsq); }, 0);
  nfn_adamw_group group = {master.data(), nullptr, grad.data(), m.data(), v.data(), params, 0.1f};
  int step = 0;
  add("adamw_step_many", 1, [&] { return nfn_adamw_step_many(ctx, &group, 1, ++step, 1e-4f, 0.9f, 0.95f, 1e-8f, &sumsq, 1.f, NFN_F32); }, 0);

  // Not part of a step: the machine's f32 (or bf16-mode) GEMM rate, for comparison.
  {
    const int S = 2048;
    auto a = random_vec(size_t(S) * S, 11, 1.f), w2 = random_vec(size_t(S) * S, 12, 1.f);
    std::vector<float> c(size_t(S) * S);
    add("calibration: linear 2048x2048x2048", 0, [&] {
      return nfn_linear_forward(ctx, c.data(), nullptr, a.data(), w2.data(), nullptr, S, S, S, NFN_EPILOGUE_NONE,
                                NFN_F32);
    }, gf(S, S, S));
  }
  double total = 0;
  std::printf("%-36s %6s %10s %8s %8s %10s\n", "op (matmul=", "calls", "median ms", "min ms", "GFLOP/s", "ms/step");
  std::printf("%-36s\n", bf16 ? "bf16)" : "f32)");
  for (const Row& r : rows) {
    total += r.per_step * r.median_ms;
    char rate[32] = "";
    if (r.gflop > 0) std::snprintf(rate, sizeof rate, "%.0f", r.gflop / (r.median_ms * 1e-3));
    std::printf("%-36s %6d %10.3f %8.3f %8s %10.2f\n", r.name.c_str(), r.per_step, r.median_ms, r.min_ms, rate,
                r.per_step * r.median_ms);
  }
  std::printf("ops per step: %.1f ms -> at most %.0f tokens/s (%d tokens per step)\n", total, N / (total * 1e-3), N);
  nfn_ctx_destroy(ctx);
  return 0;
}
