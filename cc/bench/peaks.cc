#include "cc/bench/peaks.h"

#include <cstdio>

#include "cc/train/mfu.h"

namespace nfn::bench {

Peak device_peak(const std::string& backend, const std::string& device, nfn_dtype dtype) {
  Peak p;
  if (backend != "cuda") {
    p.basis = "none for CPUs: their peak (cores x clock x FLOPs a cycle) depends on a core design "
              "/proc/cpuinfo does not name";
    return p;
  }
  const std::string name = device.empty() ? "this GPU" : device;
  const double tflops = nfn::bf16_peak_tflops(device);
  p.memory_gbps = nfn::memory_bandwidth_gbps(device);
  p.compute_gflops = dtype == NFN_BF16 ? tflops * 1e3 : 0;
  if (tflops == 0 && p.memory_gbps == 0) {
    p.basis = name + " is not in the datasheet table (cc/train/mfu.h)";
    return p;
  }
  char text[256];
  std::snprintf(text, sizeof text, "%s datasheet (cc/train/mfu.h): ", name.c_str());
  p.basis = text;
  if (p.compute_gflops > 0) {
    std::snprintf(text, sizeof text, "%g TFLOP/s dense bf16", tflops);
    p.basis += text;
  } else {
    p.basis += dtype == NFN_BF16 ? "no bf16 compute peak" : "no compute peak for f32 storage (bf16's only)";
  }
  if (p.memory_gbps > 0) {
    std::snprintf(text, sizeof text, ", %g GB/s memory", p.memory_gbps);
    p.basis += text;
  } else {
    p.basis += ", no memory bandwidth";
  }
  return p;
}

}  // namespace nfn::bench
