// Token ids from Python: any integer numpy array of the expected rank and any strides, each
// id checked to fit int32 and copied, never narrowed or rounded (nanobind's implicit
// conversion turned an int64 2^32+3 into 3, a float 3.9 into 3).
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace nfn::py {

using IdArray = nanobind::ndarray<nanobind::ro, nanobind::device::cpu>;

inline std::vector<int32_t> ids_of(const IdArray& a, size_t ndim, const char* what) {
  namespace dl = nanobind::dlpack;
  const auto dt = a.dtype();
  const bool is_int = dt.code == static_cast<uint8_t>(dl::dtype_code::Int),
             is_uint = dt.code == static_cast<uint8_t>(dl::dtype_code::UInt);
  if (!(is_int || is_uint) || dt.lanes != 1 || (dt.bits != 8 && dt.bits != 16 && dt.bits != 32 && dt.bits != 64))
    throw nanobind::type_error((std::string(what) + " must be an array of integer token ids").c_str());
  if (a.ndim() != ndim)
    throw std::invalid_argument(std::string(what) + " must have " + std::to_string(ndim) + " dimension(s), not " +
                                std::to_string(a.ndim()));
  const size_t rows = ndim == 2 ? a.shape(0) : 1, cols = a.shape(ndim - 1);
  const int64_t row_stride = ndim == 2 ? a.stride(0) : 0, col_stride = a.stride(ndim - 1);
  const auto* base = static_cast<const uint8_t*>(a.data());
  const size_t item = dt.bits / 8;
  auto refuse = [&](const std::string& id, size_t at) {
    throw std::invalid_argument(std::string(what) + ": id " + id + " at position " + std::to_string(at) +
                                " does not fit int32");
  };
  std::vector<int32_t> out;
  out.reserve(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const uint8_t* p = base + (static_cast<int64_t>(r) * row_stride + static_cast<int64_t>(c) * col_stride) * item;
      int64_t v = 0;
      if (item == 1) v = is_int ? static_cast<int64_t>(*reinterpret_cast<const int8_t*>(p)) : *p;
      if (item == 2) { uint16_t u; std::memcpy(&u, p, 2); v = is_int ? static_cast<int16_t>(u) : u; }
      if (item == 4) { uint32_t u; std::memcpy(&u, p, 4); v = is_int ? static_cast<int32_t>(u) : static_cast<int64_t>(u); }
      if (item == 8) {
        uint64_t u;
        std::memcpy(&u, p, 8);
        if (is_uint && u > static_cast<uint64_t>(INT32_MAX)) refuse(std::to_string(u), r * cols + c);
        v = static_cast<int64_t>(u);
      }
      if (v < INT32_MIN || v > INT32_MAX) refuse(std::to_string(v), r * cols + c);
      out.push_back(static_cast<int32_t>(v));
    }
  return out;
}

}  // namespace nfn::py
