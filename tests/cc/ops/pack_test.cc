// nfn::cpu::pack (the operand copy of the matmul=bf16 path) and round_bf16_serial (the
// attention's, on one thread) against the definition written here, bit for bit: straight and
// transposed, to f32 and to bf16 (nfn::f32_to_bf16, scalar), with padded row strides, at
// shapes whose edges do not fill the 8x8 blocks or the 256-column chunks, at sizes that run
// on several threads (one with 2048 rows, whose packed rows must not lie 4 KiB apart), and
// on values that test the rounding: ties to even both ways, carries into the exponent,
// infinities, NaNs, zeros and subnormals.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cc/ops/cpu/pack.h"
#include "cc/util/bf16.h"
#include "tests/cc/expect.h"
#include "tests/cc/ops/op_test_util.h"

using nfn_test::bits_of;
using nfn_test::from_bits;

namespace {

template <typename Out>
Out want_element(float v);
template <>
float want_element<float>(float v) { return v; }
template <>
uint16_t want_element<uint16_t>(float v) { return nfn::f32_to_bf16(v); }

template <typename Out>
bool same(Out a, Out b) {
  if constexpr (sizeof(Out) == 4) return bits_of(a) == bits_of(b);
  else return a == b;
}

template <typename Out>
void check(const std::vector<float>& src, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  std::vector<Out> got(3);  // too small: pack grows it
  const Out* d = nfn::cpu::pack(src.data(), rows, cols, ld, trans, &got);
  const int64_t ldd = nfn::cpu::packed_ld(rows, cols, trans);
  EXPECT(ldd >= (trans ? rows : cols), "packed_ld %ld is shorter than a packed row", static_cast<long>(ldd));
  EXPECT(d == got.data() && got.size() >= static_cast<size_t>((trans ? cols : rows) * ldd),
         "pack did not grow its buffer");
  int64_t bad = 0, first = -1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t at = trans ? c * ldd + r : r * cols + c;
      if (!same(d[at], want_element<Out>(src[r * ld + c]))) {
        if (first < 0) first = at;
        ++bad;
      }
    }
  EXPECT(bad == 0, "pack<%s> rows=%ld cols=%ld ld=%ld trans=%d: %ld of %ld elements wrong, first at %ld",
         sizeof(Out) == 4 ? "f32" : "bf16", static_cast<long>(rows), static_cast<long>(cols),
         static_cast<long>(ld), trans, static_cast<long>(bad), static_cast<long>(rows * cols),
         static_cast<long>(first));
}

// round_bf16_serial into rows of stride ldd (3 longer than a row): every element rounded as
// f32_to_bf16 rounds it, and the padding between rows untouched.
void check_serial(const std::vector<float>& src, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  const int64_t out_rows = trans ? cols : rows, out_cols = trans ? rows : cols, ldd = out_cols + 3;
  std::vector<uint16_t> d(out_rows * ldd, 0xabcd);
  nfn::cpu::round_bf16_serial(src.data(), rows, cols, ld, trans, d.data(), ldd);
  int64_t bad = 0;
  for (int64_t r = 0; r < out_rows; ++r)
    for (int64_t c = 0; c < ldd; ++c) {
      const uint16_t want = c >= out_cols ? 0xabcd
                            : trans       ? nfn::f32_to_bf16(src[c * ld + r])
                                          : nfn::f32_to_bf16(src[r * ld + c]);
      bad += d[r * ldd + c] != want;
    }
  EXPECT(bad == 0, "round_bf16_serial rows=%ld cols=%ld trans=%d: %ld elements wrong", static_cast<long>(rows),
         static_cast<long>(cols), trans, static_cast<long>(bad));
}

void check_all(const std::vector<float>& src, int64_t rows, int64_t cols, int64_t ld) {
  for (bool trans : {false, true}) {
    check<float>(src, rows, cols, ld, trans);
    check<uint16_t>(src, rows, cols, ld, trans);
    check_serial(src, rows, cols, ld, trans);
  }
}

}  // namespace

int main() {
  omp_set_num_threads(3);
  // Shapes: one partial block, blocks with ragged edges, a ragged tile edge, and one large
  // enough to run on the threads; every row stride longer than the row.
  const int64_t shapes[][2] = {{5, 3}, {8, 8}, {13, 21}, {67, 130}, {300, 520}, {2048, 24}, {2032, 17}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1], ld = cols + 5;
    check_all(nfn_test::random_vec(rows * ld, static_cast<unsigned>(rows * 7 + cols), 3.f), rows, cols, ld);
  }
  // A transposed copy's rows are never a multiple of 4 KiB apart, in bf16 or in f32.
  for (int64_t rows = 1; rows <= 70000; ++rows) {
    const int64_t ldd = nfn::cpu::packed_ld(rows, 1, true);
    if (ldd < rows || (2 * ldd) % 4096 == 0 || (4 * ldd) % 4096 == 0) {
      EXPECT(false, "packed_ld(%ld rows) = %ld", static_cast<long>(rows), static_cast<long>(ldd));
      break;
    }
  }
  // Values at the rounding's edges, placed where the vector blocks read them (a 40x24 matrix
  // is whole 8x8 blocks) and cycled so each lands in every lane position.
  const std::vector<float> special = {
      from_bits(0x3f808000u),  // tie, even below: rounds down
      from_bits(0x3f818000u),  // tie, odd below: rounds up
      from_bits(0x3f80ffffu),  // just under the next bf16
      from_bits(0x3f7fffffu),  // carries into the exponent
      from_bits(0x7f7fffffu),  // largest float: rounds to infinity
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      from_bits(0x7f800001u),  // signalling NaN: must stay NaN
      from_bits(0xffc12345u),  // negative NaN with a payload
      0.f,
      -0.f,
      from_bits(0x00000001u),  // smallest subnormal
      from_bits(0x807fffffu),  // largest negative subnormal
      -1.5f,
      3.14159265f,
      65504.f,
  };
  const int64_t rows = 40, cols = 24, ld = 27;
  std::vector<float> src(rows * ld);
  for (size_t i = 0; i < src.size(); ++i) src[i] = special[(i * 5) % special.size()];
  check_all(src, rows, cols, ld);
  // The NaN cases above compare bits against f32_to_bf16; make sure that reference itself
  // keeps a signalling NaN a NaN, so the comparison means what it says.
  EXPECT(std::isnan(nfn::bf16_to_f32(nfn::f32_to_bf16(from_bits(0x7f800001u)))), "f32_to_bf16 lost a NaN");
  return nfn_test::finish("pack_test");
}
