// The machinery of the op parity test: tensors described once on the host, uploaded to each
// backend in the dtype under test, outputs poisoned (NaN) or seeded, then compared.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cc/ops/op_library.h"

namespace parity {

inline int failures = 0;
inline int checks = 0;
inline bool quiet = false;  // a check of the harness itself, whose failure is the point

inline void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    if (!quiet) std::printf("FAIL: %s\n", what.c_str());
  }
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// Random values of magnitude 0.05..1.5 with random signs: no zeros.
inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> dist(0.05f, 1.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = ((rng() & 1) ? dist(rng) : -dist(rng)) * scale;
  return v;
}

struct Backend {
  nfn::OpLibrary lib;
  nfn_ctx* ctx = nullptr;
  const nfn_op_table& ops() const { return lib.ops; }
  std::string name() const { return lib.ops.backend_name(); }
  bool ok(nfn_status s, const std::string& op) const {
    if (s != NFN_OK)
      expect(false, name() + " " + op + ": status " + std::to_string(s) + ": " + ops().ctx_last_error(ctx));
    return s == NFN_OK;
  }
  // nfn_ctx_query's answer for `key`; a key the library does not know fails a check.
  std::string query(const char* key) const {
    const char* answer = ops().ctx_query(ctx, key);
    if (answer == nullptr) expect(false, name() + " does not answer ctx_query " + key);
    return answer != nullptr ? answer : "";
  }
  void* upload(const void* host, size_t bytes) const {
    void* d = nullptr;
    ok(ops().alloc(ctx, bytes, &d), "alloc");
    ok(ops().copy(ctx, d, host, bytes, NFN_HOST_TO_DEVICE), "copy h2d");
    return d;
  }
  void download(void* host, const void* dev, size_t bytes) const {
    ok(ops().copy(ctx, host, dev, bytes, NFN_DEVICE_TO_HOST), "copy d2h");
    ok(ops().synchronize(ctx), "synchronize");
  }
};

// How a tensor is stored: in the op's dtype, always f32 (statistics, losses, optimizer
// state), or int32 ids.
enum class Kind { data, f32, ids };

// An op argument. Inputs carry values; outputs are poisoned with NaN unless `seed` (the op
// accumulates into them, so they start from the values given).
struct Tensor {
  std::string name;
  Kind kind = Kind::data;
  std::vector<float> values;
  std::vector<int32_t> ids;
  bool output = false;
  bool seed = false;
};

inline Tensor input(std::string name, std::vector<float> v, Kind kind = Kind::data) {
  return Tensor{std::move(name), kind, std::move(v), {}, false, false};
}
inline Tensor ids(std::string name, std::vector<int32_t> v) {
  return Tensor{std::move(name), Kind::ids, {}, std::move(v), false, false};
}
inline Tensor output(std::string name, size_t n, Kind kind = Kind::data) {
  return Tensor{std::move(name), kind, std::vector<float>(n), {}, true, false};
}
inline Tensor accumulated(std::string name, std::vector<float> v, Kind kind = Kind::data) {
  return Tensor{std::move(name), kind, std::move(v), {}, true, true};
}

// Device pointers of a case's tensors, by position, for the op call.
using Call = std::function<nfn_status(const Backend&, const std::vector<void*>&, nfn_dtype)>;

struct Case {
  std::string name;
  std::vector<Tensor> tensors;
  Call call;
  // Optional backend setup (e.g. a context option) before the call; false skips the backend.
  std::function<nfn_status(const Backend&)> setup;
  // Optional: the output values an op may sum in any order (an atomic accumulation, e.g.
  // cuDNN's dQ with deterministic=off), left out of the bitwise rerun check; (tensor, index).
  std::function<bool(const std::string&, size_t)> order_dependent;
};

// Runs the case on one backend; returns each output tensor's values as floats.
inline std::vector<std::vector<float>> run(const Backend& b, const Case& c, nfn_dtype dtype) {
  std::vector<void*> ptrs;
  for (const Tensor& t : c.tensors) {
    std::vector<uint8_t> bytes;
    if (t.kind == Kind::ids) {
      bytes.resize(t.ids.size() * 4);
      std::memcpy(bytes.data(), t.ids.data(), bytes.size());
    } else if (t.kind == Kind::data && dtype == NFN_BF16) {
      bytes.resize(t.values.size() * 2);
      for (size_t i = 0; i < t.values.size(); ++i) {
        uint16_t h = t.output && !t.seed ? 0xffc0u : f32_to_bf16(t.values[i]);  // NaN poison
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    } else {
      bytes.resize(t.values.size() * 4);
      for (size_t i = 0; i < t.values.size(); ++i) {
        float f = t.output && !t.seed ? std::nanf("") : t.values[i];
        std::memcpy(bytes.data() + 4 * i, &f, 4);
      }
    }
    ptrs.push_back(bytes.empty() ? nullptr : b.upload(bytes.data(), bytes.size()));
  }
  std::vector<std::vector<float>> outs;
  if (c.setup && !b.ok(c.setup(b), c.name + " setup")) return outs;
  if (!b.ok(c.call(b, ptrs, dtype), c.name)) return outs;
  for (size_t k = 0; k < c.tensors.size(); ++k) {
    const Tensor& t = c.tensors[k];
    if (!t.output) continue;
    const size_t n = t.values.size();
    std::vector<float> v(n);
    if (t.kind == Kind::data && dtype == NFN_BF16) {
      std::vector<uint16_t> h(n);
      b.download(h.data(), ptrs[k], 2 * n);
      for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(h[i]);
    } else {
      b.download(v.data(), ptrs[k], 4 * n);
    }
    outs.push_back(std::move(v));
  }
  for (void* p : ptrs) b.ok(b.ops().free(b.ctx, p), "free");
  return outs;
}

// ||got - want|| / ||want||; infinite when anything is NaN (an unwritten, poisoned element).
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::fmax(std::sqrt(norm), 1e-30);
}

// For a failed comparison, where it went wrong: the element with the largest difference
// (its index, the GPU's and the CPU's value), the first non-finite one, and how many elements
// are off by more than `bound` of the largest reference magnitude. Enough, from one run on a
// GPU, to tell a wrong mask or a transposed tile from rounding.
inline std::string where_it_differs(const std::vector<float>& got, const std::vector<float>& want, double bound) {
  if (got.size() != want.size()) return " (sizes differ)";
  double scale = 0, worst = -1;
  size_t at = 0, off = 0, nonfinite = got.size();
  for (float w : want) scale = std::fmax(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      if (nonfinite == got.size()) nonfinite = i;
      ++off;
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (d > worst) worst = d, at = i;
    if (d > bound * scale) ++off;
  }
  char msg[256];
  std::snprintf(msg, sizeof msg, "; worst at [%zu]: %.6g vs %.6g; %zu of %zu off by more than %.0e of max |ref| %.3g",
                at, static_cast<double>(got[at]), static_cast<double>(want[at]), off, got.size(), bound, scale);
  std::string out = msg;
  if (nonfinite < got.size()) {
    std::snprintf(msg, sizeof msg, "; first non-finite at [%zu]: %g vs %g", nonfinite,
                  static_cast<double>(got[nonfinite]), static_cast<double>(want[nonfinite]));
    out += msg;
  }
  return out;
}

// Runs the case a second time and requires bitwise-equal outputs: ops are deterministic. On
// a library built on the CUDA emulator (it exports nfn_emu_reverse_order) the rerun runs
// blocks last to first and schedules each block's threads from the other end, so a float
// atomicAdd or a block reading another block's output shows up here without a GPU.
inline void expect_rerun_identical(const Backend& b, const Case& c, nfn_dtype dtype,
                                   const std::vector<std::vector<float>>& first) {
  using Reverse = void (*)(int);
  auto reverse = reinterpret_cast<Reverse>(dlsym(b.lib.handle, "nfn_emu_reverse_order"));
  if (reverse) reverse(1);
  const auto again = run(b, c, dtype);
  if (reverse) reverse(0);
  if (again.empty()) return;  // the failed call was reported
  size_t k = 0;
  for (const Tensor& t : c.tensors) {
    if (!t.output) continue;
    size_t differ = 0;
    for (size_t i = 0; i < first[k].size(); ++i)
      differ += std::memcmp(&first[k][i], &again[k][i], sizeof(float)) != 0 &&
                !(c.order_dependent && c.order_dependent(t.name, i));
    char msg[256];
    std::snprintf(msg, sizeof msg, "%s %s: %s differs bitwise in %zu of %zu values when run again%s",
                  c.name.c_str(), dtype == NFN_F32 ? "f32" : "bf16", t.name.c_str(), differ,
                  first[k].size(), reverse ? " with blocks in reverse order" : "");
    expect(differ == 0, msg);
    ++k;
  }
}

// The case in `dtype` on the GPU against the CPU in f32 on the same (bf16-rounded when dtype
// is bf16) values: fp32 within 1e-5, bf16 within 1e-2; then again on the GPU, bitwise equal.
inline void compare(const Backend& cpu, const Backend& gpu, Case c, nfn_dtype dtype) {
  if (dtype == NFN_BF16)
    for (Tensor& t : c.tensors)
      if (t.kind == Kind::data)
        for (float& v : t.values) v = round_bf16(v);
  const auto want = run(cpu, c, NFN_F32);
  const auto got = run(gpu, c, dtype);
  if (want.empty() || got.empty()) return;  // the failed call was reported
  const double bound = dtype == NFN_F32 ? 1e-5 : 1e-2;
  size_t k = 0;
  for (const Tensor& t : c.tensors) {
    if (!t.output) continue;
    const double err = rel_error(got[k], want[k]);
    char msg[256];
    std::snprintf(msg, sizeof msg, "%s %s: %s relative error %.3g (bound %.0e)", c.name.c_str(),
                  dtype == NFN_F32 ? "f32" : "bf16", t.name.c_str(), err, bound);
    expect(err < bound, err < bound ? msg : msg + where_it_differs(got[k], want[k], bound));
    ++k;
  }
  expect_rerun_identical(gpu, c, dtype, got);
}

}  // namespace parity
