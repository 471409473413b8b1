// Micro-benchmark of an op library (CPU or CUDA, opened like the trainer opens it): the
// median time of each op at a training geometry, how often one micro-step calls it, and the
// op time of a whole micro-step. Not a test. The cases and the timer are cc/bench's, which
// `nfn kernels bench` (cc/bin/kernels_bench.cc) times too.
//
//   bazel run -c opt //tools:bench_ops -- [--lib PATH] [--geometry tiny|small|demo|gpt2] [--batch N]
//       [--dtype f32|bf16] [--configure KEY=VALUE]... [--reps N] [--cpu-time] [--only TEXT]
//       [--lm-head-rows R,R,...]
//
// `bazel run` passes the CPU library as --lib (a later --lib wins). --geometry small (the CPU
// trainer benchmark's) is the default; cc/bench/shapes.h has the others. --dtype is the
// storage dtype (bf16 needs a backend that stores bf16: CUDA). --configure passes a context
// option, e.g. threads=1 or matmul=bf16 (CPU), attention=flash_mma (CUDA). Each sample times
// enough back-to-back calls to fill a millisecond, then synchronizes (cc/bench/op_timer.h).
// --cpu-time measures the process's CPU time (CPU library with threads=1: the op's own work,
// unaffected by other processes). --only times just the ops whose names contain TEXT.
// --lm-head-rows also times the LM head with each of these rows per chunk (the CUDA library's
// lm_head_rows option), as extra rows outside the step total. "embedding_backward (text-like
// ids)" (outside the step total too) runs the embedding backward on Zipf-distributed ids,
// whose frequent ids repeat as real text's do.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cc/bench/bench_error.h"
#include "cc/bench/device_buffers.h"
#include "cc/bench/op_timer.h"
#include "cc/bench/shapes.h"
#include "cc/bench/step_cases.h"
#include "cc/ops/op_library.h"

namespace {

using nfn::bench::BenchError;

struct Row {
  std::string name;
  int per_step;
  double median_ms;
  double min_ms;
  double gflop;  // per call, 0 when not a GEMM-bound op
};

struct Args {
  int reps = 20, batch = 0;
  std::string lib_path, geometry = "small";
  nfn_dtype dtype = NFN_F32;
  std::vector<std::pair<std::string, std::string>> options;
  const char* only = nullptr;
  std::vector<std::string> lm_head_rows;
  nfn::bench::Clock clock = nfn::bench::Clock::kWall;
};

int usage() {
  std::fprintf(stderr,
               "usage: bench_ops [--lib PATH] [--geometry %s] [--batch N] [--dtype f32|bf16] "
               "[--configure KEY=VALUE]... [--reps N] [--cpu-time] [--only TEXT] [--lm-head-rows R,R,...]\n",
               nfn::bench::shape_names());
  return 2;
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// false on a usage error.
bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--lib") && more) a->lib_path = argv[++i];
    else if (!std::strcmp(argv[i], "--geometry") && more) a->geometry = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && more) a->batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && more) {
      const std::string d = argv[++i];
      if (d != "f32" && d != "bf16") return false;
      a->dtype = d == "bf16" ? NFN_BF16 : NFN_F32;
    } else if (!std::strcmp(argv[i], "--configure") && more) {
      const std::string kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) return false;
      a->options.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (!std::strcmp(argv[i], "--reps") && more) a->reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--cpu-time")) a->clock = nfn::bench::Clock::kProcessCpu;
    else if (!std::strcmp(argv[i], "--only") && more) a->only = argv[++i];
    else if (!std::strcmp(argv[i], "--lm-head-rows") && more) a->lm_head_rows = split_commas(argv[++i]);
    else return false;
  }
  return true;
}

void print_table(const nfn_op_table& o, nfn_ctx* ctx, const Args& a, const nfn::bench::Shape& g,
                 const std::vector<Row>& rows) {
  double total = 0;
  std::printf("%s (%s), %s storage, geometry %s: L%d NH%d C%d T%d B%d V%d\n", o.backend_name(), a.lib_path.c_str(),
              a.dtype == NFN_BF16 ? "bf16" : "f32", a.geometry.c_str(), g.L, g.NH, g.C, g.T, g.B, g.Vp);
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
  const int N = g.B * g.T;
  std::printf("ops per micro-step: %.2f ms -> at most %.0f tokens/s (%d tokens per micro-step)\n", total,
              N / (total * 1e-3), N);
}

// Every step op's row (the LM head again at each --lm-head-rows), then the library's GEMM rate
// on a large square product, for comparison.
std::vector<Row> time_rows(const nfn_op_table& o, nfn_ctx* ctx, const Args& a, const nfn::bench::Shape& g,
                           nfn::bench::DeviceBuffers& buf) {
  std::vector<nfn::bench::OpCase> cases;
  nfn::bench::add_step_cases({&o, ctx, &buf, [](const std::string&) { return true; }, &cases}, g);
  const int S = g.calibration;
  void *x = buf.random(size_t(S) * S, 11, 1.f), *w = buf.random(size_t(S) * S, 12, 1.f);
  void* y = buf.zeros(size_t(S) * S);
  const nfn_dtype dt = a.dtype;
  cases.push_back({"calibration:", "linear " + std::to_string(S) + "^3", 0, false, 2.0 * S * S * S, 0, false,
                   [&o, ctx, x, w, y, S, dt] {
                     return o.linear_forward(ctx, y, nullptr, x, w, nullptr, nullptr, S, S, S, NFN_EPILOGUE_NONE, dt);
                   }});
  std::vector<Row> rows;
  auto add = [&](const std::string& name, int per_step, const nfn::bench::OpCase& c) {
    if (a.only && name.find(a.only) == std::string::npos) return;
    const nfn::bench::Timing t = nfn::bench::time_op(o, ctx, c.run, a.reps, a.clock);
    rows.push_back({name, per_step, t.median_ms, t.min_ms, c.flops * 1e-9});
  };
  for (const nfn::bench::OpCase& c : cases) {
    add(c.name(), c.per_step, c);
    if (c.op != "lm_head_cross_entropy" || c.variant != "(+backward)") continue;
    for (const std::string& r : a.lm_head_rows) {  // other chunk sizes, outside the step total
      if (o.ctx_configure(ctx, "lm_head_rows", r.c_str()) != NFN_OK) throw BenchError(o.ctx_last_error(ctx));
      add("lm_head_cross_entropy rows=" + r, 0, c);
    }
  }
  if (rows.empty()) throw BenchError(std::string("no op name contains '") + (a.only ? a.only : "") + "'");
  return rows;
}

int run(const Args& a) {
  nfn::bench::Shape g;
  if (!nfn::bench::shape_named(a.geometry, &g)) return usage();
  if (a.batch > 0) g.B = a.batch;
  if (a.lib_path.empty()) throw BenchError("no --lib given (bazel run //tools:bench_ops passes the CPU library)");
  nfn::OpLibrary lib;
  std::string error;
  if (!nfn::load_op_library(a.lib_path, &lib, &error)) throw BenchError(error);
  const nfn_op_table& o = lib.ops;
  nfn_ctx* ctx = nullptr;
  if (o.ctx_create(0, &ctx) != NFN_OK) throw BenchError(a.lib_path + ": " + o.ctx_last_error(nullptr));
  for (const auto& [key, value] : a.options)
    if (o.ctx_configure(ctx, key.c_str(), value.c_str()) != NFN_OK) throw BenchError(o.ctx_last_error(ctx));
  {
    nfn::bench::DeviceBuffers buf(o, ctx, a.dtype);
    print_table(o, ctx, a, g, time_rows(o, ctx, a, g, buf));
  }
  o.ctx_destroy(ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse_args(argc, argv, &a)) return usage();
  try {
    return run(a);
  } catch (const BenchError& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
}
