// nfn_kernels_bench: each op of an op library timed at a few model shapes, as JSON on stdout,
// for `nfn kernels bench` to format. The cases, the timer and the peaks are cc/bench's (the
// same as tools/bench_ops').
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cc/bench/bench_error.h"
#include "cc/bench/device_buffers.h"
#include "cc/bench/op_timer.h"
#include "cc/bench/other_cases.h"
#include "cc/bench/peaks.h"
#include "cc/bench/shapes.h"
#include "cc/bench/step_cases.h"
#include "cc/ops/backend.h"
#include "cc/util/json.h"

namespace {

using nfn::Json;
using nfn::bench::BenchError;

const char* const kUsage =
    "usage: nfn_kernels_bench [--device cpu|cuda|auto] [--tile-ops-lib PATH] [--ops NAME,...]\n"
    "                         [--shapes NAME[:BATCH],...] [--iterations N] [--dtype f32|bf16]\n"
    "                         [--configure KEY=VALUE]...\n\n"
    "Times each op of an op library at model shapes and prints JSON: the library, its device, the\n"
    "peak the rows are measured against (and its basis), the shapes, and a row per op call: its\n"
    "median and minimum milliseconds over N samples (default 5; a sample is enough back-to-back\n"
    "calls to fill a millisecond, then a synchronize), and the FLOPs (compute-bound ops) or bytes\n"
    "(memory-bound ops: each element the op must read or write, once) of one call.\n"
    "--device picks the library as the trainers do (auto: CUDA where it opens, else CPU);\n"
    "--ops takes op names from nfn_ops.def (default: every op with data work); --shapes takes\n"
    "tiny, small, demo, gpt2 (cc/bench/shapes.h), each with an optional micro-batch (default\n"
    "demo,gpt2:1 on the CPU, demo,gpt2 on CUDA); --dtype is the storage dtype (default bf16 on\n"
    "CUDA, f32 on the CPU); --configure sets a context option (matmul=bf16, attention=cudnn).\n";

struct AbiOp {
  const char* name;
  const char* category;
};

const AbiOp kAbiOps[] = {
#define NFN_OP(name, category, dtypes, params) {#name, #category},
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
};

// The ops with no data work of their own to time, and why.
const char* untimed_reason(const std::string& op) {
  if (op == "alloc" || op == "free" || op == "alloc_host" || op == "free_host") return "it allocates or frees memory";
  if (op.rfind("graph_", 0) == 0) return "it records or replays other ops: time those";
  if (op.rfind("event_", 0) == 0) return "it marks or waits for a point in the stream";
  return nullptr;
}

int abi_index(const std::string& op) {
  for (size_t i = 0; i < sizeof kAbiOps / sizeof kAbiOps[0]; ++i)
    if (op == kAbiOps[i].name) return static_cast<int>(i);
  return -1;
}

struct Args {
  std::string device = "auto", lib, shapes, dtype;
  std::vector<std::string> ops;
  int iterations = 5;
  std::vector<std::pair<std::string, std::string>> configure;
};

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Throws BenchError on a bad value; returns false for --help.
bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return false;
    if (i + 1 >= argc) throw BenchError("unknown argument " + flag + " or it lacks its value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--device") a->device = value;
    else if (flag == "--tile-ops-lib") a->lib = value;
    else if (flag == "--ops") a->ops = split_commas(value);
    else if (flag == "--shapes") a->shapes = value;
    else if (flag == "--dtype") a->dtype = value;
    else if (flag == "--iterations") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 100000) throw BenchError("--iterations " + value + ": expected a count of at least 1");
      a->iterations = static_cast<int>(n);
    } else if (flag == "--configure") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos) throw BenchError("--configure " + value + ": expected KEY=VALUE");
      a->configure.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      throw BenchError("unknown argument " + flag + " (see --help)");
    }
  }
  if (a->device != "cpu" && a->device != "cuda" && a->device != "auto")
    throw BenchError("--device " + a->device + ": expected cpu, cuda or auto");
  if (!a->dtype.empty() && a->dtype != "f32" && a->dtype != "bf16")
    throw BenchError("--dtype " + a->dtype + ": expected f32 or bf16");
  for (const std::string& op : a->ops) {
    if (abi_index(op) < 0) throw BenchError("unknown op '" + op + "' (nfn kernels list names every op)");
    if (const char* why = untimed_reason(op)) throw BenchError("op '" + op + "' is not benchmarked: " + why);
  }
  return true;
}

std::vector<nfn::bench::Shape> parse_shapes(const std::string& spec) {
  std::vector<nfn::bench::Shape> shapes;
  for (const std::string& item : split_commas(spec)) {
    const size_t colon = item.find(':');
    nfn::bench::Shape s;
    if (!nfn::bench::shape_named(item.substr(0, colon), &s))
      throw BenchError("--shapes: unknown shape '" + item.substr(0, colon) + "' (expected " +
                       nfn::bench::shape_names() + ")");
    if (colon != std::string::npos) {
      const int batch = std::atoi(item.c_str() + colon + 1);
      if (batch < 1) throw BenchError("--shapes " + item + ": the micro-batch must be at least 1");
      s.B = batch;
      s.name = item;  // "gpt2:1": the rows of two batches of one shape stay apart
    }
    shapes.push_back(s);
  }
  if (shapes.empty()) throw BenchError("--shapes names no shape");
  return shapes;
}

Json shape_json(const nfn::bench::Shape& s) {
  Json j = Json::object();
  j.set("name", s.name);
  for (const auto& [key, value] : {std::pair<const char*, int>{"L", s.L}, {"NH", s.NH}, {"C", s.C}, {"T", s.T},
                                   {"B", s.B}, {"vocab", s.vocab}, {"Vp", s.Vp}})
    j.set(key, value);
  return j;
}

// The shape's cases for the wanted ops, in nfn_ops.def's order (bench_ops' breakdown cases
// left out), timed; a row each.
void time_shape(const nfn::Backend& b, const Args& a, nfn_dtype dtype, const nfn::bench::Shape& shape,
                Json* rows) {
  nfn::bench::DeviceBuffers buf(b.lib.ops, b.ctx, dtype);
  auto want = [&](const std::string& op) {
    return a.ops.empty() ? untimed_reason(op) == nullptr : std::count(a.ops.begin(), a.ops.end(), op) > 0;
  };
  std::vector<nfn::bench::OpCase> cases;
  const nfn::bench::CaseSink sink{&b.lib.ops, b.ctx, &buf, want, &cases};
  nfn::bench::add_step_cases(sink, shape);
  nfn::bench::add_other_cases(sink, shape);
  for (const AbiOp& op : kAbiOps)
    if (want(op.name) && std::none_of(cases.begin(), cases.end(), [&](const auto& c) { return c.op == op.name; }))
      throw BenchError(std::string("op '") + op.name + "' has no benchmark case");
  std::stable_sort(cases.begin(), cases.end(),
                   [](const auto& x, const auto& y) { return abi_index(x.op) < abi_index(y.op); });
  for (const nfn::bench::OpCase& c : cases) {
    if (c.breakdown) continue;
    const nfn::bench::Timing t =
        nfn::bench::time_op(b.lib.ops, b.ctx, c.run, a.iterations, nfn::bench::Clock::kWall);
    Json row = Json::object();
    row.set("shape", shape.name);
    row.set("op", c.op);
    row.set("category", kAbiOps[abi_index(c.op)].category);
    row.set("variant", c.variant);
    row.set("median_ms", t.median_ms);
    row.set("min_ms", t.min_ms);
    row.set("flops", c.flops);
    row.set("bytes", c.bytes);
    row.set("host_link", c.host_link);
    rows->push(row);
  }
}

Json run(const Args& a) {
  nfn::Backend b;
  std::string error;
  if (!nfn::open_backend(a.device, a.lib, &b, &error)) throw BenchError(error);
  for (const auto& [key, value] : a.configure)
    if (b.lib.ops.ctx_configure(b.ctx, key.c_str(), value.c_str()) != NFN_OK)
      throw BenchError(b.lib.ops.ctx_last_error(b.ctx));
  const std::string dtype_name = !a.dtype.empty() ? a.dtype : b.name == "cuda" ? "bf16" : "f32";
  const nfn_dtype dtype = dtype_name == "bf16" ? NFN_BF16 : NFN_F32;
  const auto shapes = parse_shapes(!a.shapes.empty() ? a.shapes : b.name == "cuda" ? "demo,gpt2" : "demo,gpt2:1");
  const char* device = b.lib.ops.ctx_query(b.ctx, "device");
  const nfn::bench::Peak peak = nfn::bench::device_peak(b.name, device ? device : "", dtype);
  Json out = Json::object();
  out.set("schema", 1);
  out.set("backend", b.name);
  out.set("library", b.path);
  out.set("device", device ? device : "");
  out.set("dtype", dtype_name);
  out.set("iterations", a.iterations);
  Json configure = Json::object();
  for (const auto& [key, value] : a.configure) configure.set(key, value);
  out.set("configure", configure);
  Json peak_json = Json::object();
  peak_json.set("compute_gflops", peak.compute_gflops > 0 ? Json(peak.compute_gflops) : Json());
  peak_json.set("memory_gbps", peak.memory_gbps > 0 ? Json(peak.memory_gbps) : Json());
  peak_json.set("basis", peak.basis);
  out.set("peak", peak_json);
  Json shapes_json = Json::array(), rows = Json::array();
  for (const auto& s : shapes) shapes_json.push(shape_json(s));
  out.set("shapes", shapes_json);
  for (const auto& s : shapes) time_shape(b, a, dtype, s, &rows);
  out.set("rows", rows);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a;
    if (!parse_args(argc, argv, &a)) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::printf("%s\n", run(a).dump(1).c_str());
    return 0;
  } catch (const BenchError& e) {
    std::fprintf(stderr, "nfn_kernels_bench: error: %s\n", e.what());
    return 1;
  }
}
