// Model FLOPs utilisation, counted as llm.c counts it: 6 FLOPs per parameter per token for the
// forward and backward, plus 6 L T C for attention's products (the causal half: nanoGPT's PaLM
// formula counts 12 L T C), against the device's dense bf16 tensor-core peak. Also the
// devices' memory bandwidth, which `nfn kernels bench` measures memory-bound ops against.
#pragma once

#include <cstddef>
#include <string>

namespace nfn {

// The dense bf16 peak in TFLOP/s of the GPUs whose datasheet number their CUDA name pins
// down, else 0 (no MFU): A100 (SXM and PCIe alike) 312; H100 SXM ("NVIDIA H100 80GB HBM3")
// and H200 SXM ("NVIDIA H200") 989.4. PCIe and NVL boards of the H100/H200 run other clocks
// and power limits, so other peaks; they are left out rather than guessed.
inline double bf16_peak_tflops(const std::string& device) {
  auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
  if (has("A100")) return 312;
  if (has("PCIe") || has("NVL")) return 0;
  if ((has("H100") && has("HBM3")) || has("H200")) return 989.4;
  return 0;
}

// The memory bandwidth in GB/s of the same boards, where their CUDA name pins it down, else
// 0: A100 40GB (SXM and PCIe) 1555, A100 80GB PCIe 1935, A100 80GB SXM 2039, H100 SXM 3350,
// H200 (SXM and NVL alike) 4800. The benchmarks' memory-bound ops are measured against it.
inline double memory_bandwidth_gbps(const std::string& device) {
  auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
  if (has("A100")) return !has("80GB") ? 1555 : has("PCIe") ? 1935 : 2039;
  if (has("H200")) return 4800;
  if (has("H100") && has("HBM3")) return 3350;
  return 0;
}

inline double flops_per_token(size_t parameters, int layers, int seq_len, int channels) {
  return 6.0 * static_cast<double>(parameters) + 6.0 * layers * seq_len * static_cast<double>(channels);
}

}  // namespace nfn
