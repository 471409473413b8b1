// Every op of the CUDA library against the CPU library on the same random inputs.
// Outputs are poisoned (NaN) before each run; without a GPU the test says why and skips.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cc/ops/op_library.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

struct Backend {
  nfn::OpLibrary lib;
  nfn_ctx* ctx = nullptr;
  const nfn_op_table& ops() const { return lib.ops; }
  void check(nfn_status s, const char* op) const {
    if (s != NFN_OK) expect(false, std::string(lib.ops.backend_name()) + " " + op + ": " + lib.ops.ctx_last_error(ctx));
  }
  // Host vector -> fresh device buffer.
  void* upload(const void* host, size_t bytes) const {
    void* d = nullptr;
    check(ops().alloc(ctx, bytes, &d), "alloc");
    check(ops().copy(ctx, d, host, bytes, NFN_HOST_TO_DEVICE), "copy h2d");
    return d;
  }
  void download(void* host, const void* dev, size_t bytes) const {
    check(ops().copy(ctx, host, dev, bytes, NFN_DEVICE_TO_HOST), "copy d2h");
    check(ops().synchronize(ctx), "synchronize");
  }
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.05f, 1.5f);  // no zeros
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? dist(rng) : -dist(rng);
  return v;
}

double rel_err(double a, double b) { return std::fabs(a - b) / std::fmax(std::fabs(b), 1e-30); }

// bf16 bit patterns of random floats (round to nearest even, as both backends store them).
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

std::vector<uint8_t> run_fill(const Backend& b, nfn_dtype dtype, size_t n) {
  const size_t bytes = n * (dtype == NFN_F32 ? 4 : 2);
  std::vector<uint8_t> out(bytes, 0xff);  // poison: NaN in both dtypes
  void* d = b.upload(out.data(), bytes);
  b.check(b.ops().fill(b.ctx, d, dtype, 0.7f, n), "fill");
  b.download(out.data(), d, bytes);
  b.check(b.ops().free(b.ctx, d), "free");
  return out;
}

float run_sum_squares(const Backend& b, nfn_dtype dtype, const std::vector<std::vector<uint8_t>>& bufs) {
  std::vector<const void*> ptrs;
  std::vector<size_t> counts;
  for (const auto& h : bufs) {
    ptrs.push_back(b.upload(h.data(), h.size()));
    counts.push_back(h.size() / (dtype == NFN_F32 ? 4 : 2));
  }
  float poison = std::nanf(""), out = 0.f;
  void* d_out = b.upload(&poison, sizeof poison);
  b.check(b.ops().sum_squares_many(b.ctx, ptrs.data(), counts.data(), static_cast<int>(ptrs.size()),
                                   dtype, static_cast<float*>(d_out)),
          "sum_squares_many");
  b.download(&out, d_out, sizeof out);
  for (const void* p : ptrs) b.check(b.ops().free(b.ctx, const_cast<void*>(p)), "free");
  b.check(b.ops().free(b.ctx, d_out), "free");
  return out;
}

void check_fill(const Backend& cpu, const Backend& gpu) {
  for (nfn_dtype dtype : {NFN_F32, NFN_BF16}) {
    const size_t n = 100003;
    expect(run_fill(cpu, dtype, n) == run_fill(gpu, dtype, n),
           "fill differs from the CPU (dtype " + std::to_string(dtype) + ")");
  }
}

void check_sum_squares(const Backend& cpu, const Backend& gpu) {
  const size_t sizes[] = {1, 4097, 1 << 18, 77};
  for (nfn_dtype dtype : {NFN_F32, NFN_BF16}) {
    std::vector<std::vector<uint8_t>> bufs;
    uint32_t seed = 1;
    for (size_t n : sizes) {
      std::vector<float> v = random_floats(n, seed++);
      std::vector<uint8_t> bytes;
      if (dtype == NFN_F32) {
        bytes.resize(n * 4);
        std::memcpy(bytes.data(), v.data(), bytes.size());
      } else {
        std::vector<uint16_t> h = to_bf16(v);
        bytes.resize(n * 2);
        std::memcpy(bytes.data(), h.data(), bytes.size());
      }
      bufs.push_back(std::move(bytes));
    }
    const double want = run_sum_squares(cpu, dtype, bufs), got = run_sum_squares(gpu, dtype, bufs);
    const double bound = dtype == NFN_F32 ? 1e-5 : 1e-2;
    expect(rel_err(got, want) < bound, "sum_squares_many dtype " + std::to_string(dtype) + ": gpu " +
                                           std::to_string(got) + " cpu " + std::to_string(want));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::printf("usage: ops_parity_test CPU_LIB CUDA_LIB\n");
    return 2;
  }
  Backend cpu, gpu;
  std::string error;
  if (!nfn::load_op_library(argv[1], &cpu.lib, &error) || !nfn::load_op_library(argv[2], &gpu.lib, &error)) {
    std::printf("FAIL: %s\n", error.c_str());
    return 1;
  }
  if (gpu.ops().ctx_create(0, &gpu.ctx) != NFN_OK) {
    std::printf("SKIP: CUDA op parity not run: %s\n", gpu.ops().ctx_last_error(nullptr));
    return 0;
  }
  cpu.check(cpu.ops().ctx_create(0, &cpu.ctx), "ctx_create");
  check_fill(cpu, gpu);
  check_sum_squares(cpu, gpu);
  gpu.ops().ctx_destroy(gpu.ctx);
  cpu.ops().ctx_destroy(cpu.ctx);
  std::printf(failures ? "%d failures\n" : "PASS\n", failures);
  return failures ? 1 : 0;
}
