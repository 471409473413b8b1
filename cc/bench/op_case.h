// One timed call pattern of an ABI op, with the work it does per call, so a benchmark can
// turn its time into GFLOP/s or GB/s.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cc/bench/device_buffers.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn::bench {

struct OpCase {
  std::string op;       // the ABI op (its name in nfn_ops.def)
  std::string variant;  // which call of it ("qkv 768->2304"), "" for the op's only one
  int per_step = 0;     // calls in one training micro-step of the shape's GPT (0: outside it)
  bool breakdown = false;  // a part of another case's work, timed apart (bench_ops' detail)
  double flops = 0;     // per call, for the compute-bound ops; 0 for the others
  double bytes = 0;     // per call: each element the op must read or write, counted once
  bool host_link = false;  // bytes cross between host and device memory (no memory peak)
  std::function<nfn_status()> run;

  std::string name() const { return variant.empty() ? op : op + " " + variant; }
};

// Which ABI ops to build cases for (the others' buffers are never allocated).
using OpFilter = std::function<bool(const std::string& op)>;

// What the case builders share: the library, its context, the storage dtype, the buffers
// the cases' calls use (kept until they are released), and where the cases go.
struct CaseSink {
  const nfn_op_table* ops;
  nfn_ctx* ctx;
  DeviceBuffers* buf;
  OpFilter want;
  std::vector<OpCase>* out;

  nfn_dtype dtype() const { return buf->dtype(); }
  double e() const { return static_cast<double>(buf->element_bytes()); }
  bool wants_any(const std::vector<const char*>& names) const {
    for (const char* n : names)
      if (want(n)) return true;
    return false;
  }
  void add(OpCase c) const {
    if (want(c.op)) out->push_back(std::move(c));
  }
};

}  // namespace nfn::bench
