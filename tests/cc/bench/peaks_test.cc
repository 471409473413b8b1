// The peak each kind of benchmark row is measured against, for the devices the datasheet table
// names and for those it does not.
#include "cc/bench/peaks.h"

#include <string>

#include "tests/cc/expect.h"

int main() {
  struct Case {
    const char* backend;
    const char* device;
    nfn_dtype dtype;
    double gflops, gbps;
    const char* basis;
  };
  const Case cases[] = {
      {"cuda", "NVIDIA H200", NFN_BF16, 989400, 4800,
       "NVIDIA H200 datasheet (cc/train/mfu.h): 989.4 TFLOP/s dense bf16, 4800 GB/s memory"},
      // The table's compute peak is bf16's; f32 storage keeps the bandwidth only.
      {"cuda", "NVIDIA H100 80GB HBM3", NFN_F32, 0, 3350,
       "NVIDIA H100 80GB HBM3 datasheet (cc/train/mfu.h): no compute peak for f32 storage (bf16's only), "
       "3350 GB/s memory"},
      {"cuda", "NVIDIA A100-SXM4-40GB", NFN_BF16, 312000, 1555,
       "NVIDIA A100-SXM4-40GB datasheet (cc/train/mfu.h): 312 TFLOP/s dense bf16, 1555 GB/s memory"},
      // An H100 PCIe's clocks differ from the SXM board's: no compute peak, no bandwidth.
      {"cuda", "NVIDIA H100 PCIe", NFN_BF16, 0, 0, "NVIDIA H100 PCIe is not in the datasheet table (cc/train/mfu.h)"},
      {"cuda", "nfn CUDA emulator", NFN_BF16, 0, 0, "nfn CUDA emulator is not in the datasheet table (cc/train/mfu.h)"},
      // A CPU named like a GPU still has no peak: CPUs are not in the table.
      {"cpu", "NVIDIA H200", NFN_F32, 0, 0, nullptr},
  };
  for (const Case& c : cases) {
    const nfn::bench::Peak p = nfn::bench::device_peak(c.backend, c.device, c.dtype);
    EXPECT(p.compute_gflops == c.gflops && p.memory_gbps == c.gbps, "%s %s: %g GFLOP/s %g GB/s, expected %g %g",
           c.backend, c.device, p.compute_gflops, p.memory_gbps, c.gflops, c.gbps);
    if (c.basis != nullptr)
      EXPECT(p.basis == c.basis, "%s: basis '%s', expected '%s'", c.device, p.basis.c_str(), c.basis);
    else
      EXPECT(p.basis.rfind("none for CPUs", 0) == 0, "cpu basis '%s'", p.basis.c_str());
  }
  return nfn_test::finish("peaks_test");
}
