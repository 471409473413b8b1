// The peak a benchmark row is measured against: from the datasheet table in cc/train/mfu.h
// for the GPUs it names, none for CPUs (and for any device it does not name).
#pragma once

#include <string>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn::bench {

struct Peak {
  double compute_gflops = 0;  // 0: unknown
  double memory_gbps = 0;     // 0: unknown
  std::string basis;          // where the numbers come from, or why there are none
};

// backend: "cpu" or "cuda"; device: the library's nfn_ctx_query(ctx, "device"). The compute
// peak is the dense bf16 tensor-core one, so it is known only for bf16 storage.
Peak device_peak(const std::string& backend, const std::string& device, nfn_dtype dtype);

}  // namespace nfn::bench
