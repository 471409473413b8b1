// The MFU peak and memory bandwidth tables against the names CUDA gives these boards
// (cudaDeviceProp::name), and the FLOP count against its formula.
#include "cc/train/mfu.h"

#include "tests/cc/expect.h"

int main() {
  struct Board {
    const char* name;
    double peak;
  };
  const Board boards[] = {
      {"NVIDIA H100 80GB HBM3", 989.4}, {"NVIDIA H200", 989.4},         {"NVIDIA A100-SXM4-80GB", 312},
      {"NVIDIA A100 80GB PCIe", 312},   {"NVIDIA H100 PCIe", 0},        {"NVIDIA H100 NVL", 0},
      {"NVIDIA H200 NVL", 0},           {"NVIDIA GeForce RTX 5090", 0}, {"nfn CUDA emulator", 0},
      {"", 0},
  };
  for (const Board& b : boards)
    EXPECT(nfn::bf16_peak_tflops(b.name) == b.peak, "%s: %g TFLOP/s, expected %g", b.name,
           nfn::bf16_peak_tflops(b.name), b.peak);
  const Board bandwidths[] = {
      {"NVIDIA H100 80GB HBM3", 3350},  {"NVIDIA H200", 4800},          {"NVIDIA H200 NVL", 4800},
      {"NVIDIA A100-SXM4-80GB", 2039},  {"NVIDIA A100 80GB PCIe", 1935}, {"NVIDIA A100-SXM4-40GB", 1555},
      {"NVIDIA A100-PCIE-40GB", 1555},  {"NVIDIA H100 PCIe", 0},         {"NVIDIA GeForce RTX 5090", 0},
      {"nfn CUDA emulator", 0},         {"", 0},
  };
  for (const Board& b : bandwidths)
    EXPECT(nfn::memory_bandwidth_gbps(b.name) == b.peak, "%s: %g GB/s, expected %g", b.name,
           nfn::memory_bandwidth_gbps(b.name), b.peak);
  // 6 per parameter, 6 L T C for attention: 6 * 100 + 6 * 2 * 8 * 4.
  EXPECT(nfn::flops_per_token(100, 2, 8, 4) == 984.0, "flops_per_token %g", nfn::flops_per_token(100, 2, 8, 4));
  return nfn_test::finish("mfu_test");
}
