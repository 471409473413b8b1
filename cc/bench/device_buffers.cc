#include "cc/bench/device_buffers.h"

#include <algorithm>
#include <cstring>

#include "cc/bench/bench_error.h"
#include "cc/util/bf16.h"

namespace nfn::bench {

void DeviceBuffers::release() {
  for (void* p : owned_) ops_.free(ctx_, p);
  for (void* p : owned_host_) ops_.free_host(ctx_, p);
  owned_.clear();
  owned_host_.clear();
}

void DeviceBuffers::check(nfn_status s, const std::string& what) const {
  if (s != NFN_OK) throw BenchError(what + ": " + ops_.ctx_last_error(ctx_));
}

void* DeviceBuffers::random(size_t n, uint64_t seed, float scale, bool f32) {
  float* v = staging(n);
  uint64_t z = seed * 0x9E3779B97F4A7C15ull;
  const float half_width = scale * 1.7320508f;  // uniform on [-a, a] has deviation a / sqrt(3)
  for (size_t i = 0; i < n; ++i) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t r = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
    r ^= r >> 31;
    v[i] = (static_cast<float>(r >> 40) * 0x1p-23f - 1.f) * half_width;
  }
  return upload(v, n, f32);
}

void* DeviceBuffers::zeros(size_t n, bool f32) {
  float* v = staging(n);
  std::fill(v, v + n, 0.f);
  return upload(v, n, f32);
}

void* DeviceBuffers::upload(const float* v, size_t n, bool f32) {
  if (f32 || dtype_ == NFN_F32) return put(v, n * 4);
  if (staging16_.size() < n) staging16_.resize(n);
  for (size_t i = 0; i < n; ++i) staging16_[i] = nfn::f32_to_bf16(v[i]);
  return put(staging16_.data(), n * 2);
}

void* DeviceBuffers::put(const void* host, size_t bytes) {
  void* p = nullptr;
  check(ops_.alloc(ctx_, bytes, &p), "alloc");
  owned_.push_back(p);
  check(ops_.copy(ctx_, p, host, bytes, NFN_HOST_TO_DEVICE), "upload");
  check(ops_.synchronize(ctx_), "upload");  // the staging buffer is reused next
  return p;
}

void* DeviceBuffers::host(size_t bytes) {
  void* p = nullptr;
  check(ops_.alloc_host(ctx_, bytes, &p), "alloc_host");
  owned_host_.push_back(p);
  std::memset(p, 0, bytes);
  return p;
}

float* DeviceBuffers::staging(size_t n) {
  if (staging_.size() < n) staging_.resize(n);
  return staging_.data();
}

}  // namespace nfn::bench
