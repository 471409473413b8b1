// Buffers in an op library's memory for benchmarks, filled from the host in a storage dtype
// and freed together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn::bench {

class DeviceBuffers {
 public:
  DeviceBuffers(const nfn_op_table& ops, nfn_ctx* ctx, nfn_dtype dtype) : ops_(ops), ctx_(ctx), dtype_(dtype) {}
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() { release(); }

  nfn_dtype dtype() const { return dtype_; }
  size_t element_bytes() const { return dtype_ == NFN_F32 ? 4 : 2; }
  void release();
  // Throws BenchError with `what` and the library's message when s is not NFN_OK.
  void check(nfn_status s, const std::string& what) const;

  // n values of standard deviation `scale` (uniform, from splitmix64: GPT-2's geometry needs
  // half a billion, which a normal distribution takes tens of seconds to draw) in the storage
  // dtype, or f32 where `f32`.
  void* random(size_t n, uint64_t seed, float scale, bool f32 = false);
  void* zeros(size_t n, bool f32 = false);
  void* upload(const float* v, size_t n, bool f32);
  // `bytes` of host memory copied up as they are.
  void* put(const void* host, size_t bytes);
  // Host memory from the library's alloc_host (page-locked on CUDA), zeroed.
  void* host(size_t bytes);

 private:
  const nfn_op_table& ops_;
  nfn_ctx* ctx_;
  nfn_dtype dtype_;
  std::vector<void*> owned_;
  std::vector<void*> owned_host_;
  std::vector<float> staging_;       // host values on their way up, reused (GPT-2's are 200 MB)
  std::vector<uint16_t> staging16_;  // the same as bf16

  float* staging(size_t n);
};

}  // namespace nfn::bench
