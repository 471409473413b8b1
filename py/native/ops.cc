// Bindings for the CPU op library.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"
#include "cc/util/quant.h"
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

using U8Array = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

int quant_type(const std::string& name) {
  const int type = nfn::quant::parse_type(name);
  if (type < 0) throw std::invalid_argument("qtype: '" + name + "' is not q8_0, q4_1 or nf4");
  return type;
}

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> owned(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

// cc/util/quant's host quantizer and the op library's dequantize, for tests and tools.
nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> quantize(F32Array x, const std::string& qtype) {
  const int type = quant_type(qtype);
  if (x.size() % nfn::quant::kBlock != 0) throw std::invalid_argument("quantize: the size is not a multiple of 32");
  std::vector<uint8_t> out(nfn::quant::bytes_of(type, x.size()));
  nfn::quant::quantize(type, x.data(), x.size(), out.data());
  return owned(std::move(out));
}

nb::ndarray<nb::numpy, float, nb::ndim<1>> dequantize(U8Array blocks, const std::string& qtype) {
  const int type = quant_type(qtype);
  if (blocks.size() % nfn::quant::block_bytes(type) != 0)
    throw std::invalid_argument("dequantize: the bytes are not whole " + qtype + " blocks");
  const size_t n = blocks.size() / nfn::quant::block_bytes(type) * nfn::quant::kBlock;
  std::vector<float> out(n);
  Ctx c;
  c.check(nfn_dequantize(c.ctx, out.data(), blocks.data(), static_cast<nfn_qtype>(type), n, NFN_F32));
  return owned(std::move(out));
}

}  // namespace

namespace nfn::py {

void bind_ops(nb::module_& m) {
  m.def("abi_version", &nfn_abi_version, "The op ABI version this module was built with.");
  m.def("backend_name", []() { return std::string(nfn_backend_name()); });
  m.def("sum_squares", &sum_squares, nb::arg("arrays"),
        "Sum of squares over float32 arrays through the CPU op nfn_sum_squares_many.");
  m.def("quantize", &quantize, nb::arg("values"), nb::arg("qtype"),
        "Block-quantize float32 values (a multiple of 32) as q8_0, q4_1 or nf4: the blocks' bytes.");
  m.def("dequantize", &dequantize, nb::arg("blocks"), nb::arg("qtype"),
        "The float32 values of whole q8_0, q4_1 or nf4 blocks, through the CPU op nfn_dequantize.");
}

}  // namespace nfn::py
