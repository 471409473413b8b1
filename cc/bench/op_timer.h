// Times one call pattern of an op library: the median and minimum of `samples` samples.
#pragma once

#include <functional>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn::bench {

// kProcessCpu: the process's CPU time (the CPU library with threads=1: an op's own work,
// unaffected by other processes on the machine).
enum class Clock { kWall, kProcessCpu };

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
};

// A sample is enough back-to-back calls of `op` to fill about a millisecond, then one
// synchronize, divided by the calls, so launch-bound GPU ops are timed as a trainer issues
// them. Two untimed samples of one call come first (the first call creates primitives and
// handles and touches memory; the second sizes the samples). Throws BenchError with the
// library's message when a call fails.
Timing time_op(const nfn_op_table& ops, nfn_ctx* ctx, const std::function<nfn_status()>& op, int samples,
               Clock clock);

}  // namespace nfn::bench
