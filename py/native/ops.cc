// Bindings for the CPU op library.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"
#include "py/native/bindings.h"

namespace nb = nanobind;

namespace {

using F32Array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// Owns one CPU op context for the calls below.
struct Ctx {
  nfn_ctx* ctx = nullptr;
  Ctx() {
    if (nfn_ctx_create(0, &ctx) != NFN_OK) throw std::runtime_error("nfn_ctx_create failed");
  }
  ~Ctx() { nfn_ctx_destroy(ctx); }
  void check(nfn_status s) const {
    if (s != NFN_OK) throw std::runtime_error(nfn_ctx_last_error(ctx));
  }
};

float sum_squares(const std::vector<F32Array>& arrays) {
  Ctx c;
  std::vector<const void*> bufs;
  std::vector<size_t> counts;
  for (const auto& a : arrays) {
    bufs.push_back(a.data());
    counts.push_back(a.size());
  }
  float out = 0.f;
  c.check(nfn_sum_squares_many(c.ctx, bufs.data(), counts.data(), static_cast<int>(bufs.size()),
                               NFN_F32, &out));
  return out;
}

}  // namespace

namespace nfn::py {

void bind_ops(nb::module_& m) {
  m.def("abi_version", &nfn_abi_version, "The op ABI version this module was built with.");
  m.def("backend_name", []() { return std::string(nfn_backend_name()); });
  m.def("sum_squares", &sum_squares, nb::arg("arrays"),
        "Sum of squares over float32 arrays through the CPU op nfn_sum_squares_many.");
}

}  // namespace nfn::py
