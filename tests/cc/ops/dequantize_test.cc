// The dequantize op and cc/util/quant's quantizer against the formats' definitions, written
// here from their byte layouts: every value of hand-made blocks in each format; quantized random
// rows within each format's error bound (half a step, NF4 the nearest level, plus the f16 scales');
// bf16 output as the f32 value rounded to nearest even; f16 scales rounded to nearest even;
// bad arguments.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cc/util/bf16.h"
#include "cc/util/f16.h"
#include "cc/util/quant.h"
#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;
namespace q = nfn::quant;

namespace {

const double kNF4[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                         -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                         0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                         0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};

void put16(uint8_t* p, uint16_t h) { p[0] = h & 0xff, p[1] = h >> 8; }

// Two blocks of each format with chosen scales (exact halves) and every code; the value the
// definition gives for each element.
std::vector<uint8_t> hand_blocks(int type, std::vector<double>* want) {
  std::vector<uint8_t> bytes(2 * q::block_bytes(type));
  const uint16_t d_half[2] = {0x3800, 0xB400};  // 0.5 and -0.25
  const uint16_t m_half[2] = {0xC000, 0x3C00};  // -2 and 1
  const double d[2] = {0.5, -0.25}, m[2] = {-2.0, 1.0};
  for (int b = 0; b < 2; ++b) {
    uint8_t* blk = bytes.data() + b * q::block_bytes(type);
    put16(blk, d_half[b]);
    for (int j = 0; j < 32; ++j) {
      if (type == q::kQ8_0) {
        const int code = (j * 37 + b * 11) % 256 - 128;  // -128..127
        blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(code));
        want->push_back(d[b] * code);
        continue;
      }
      const int code = (j * 7 + b * 3) % 16;
      uint8_t* qs = blk + (type == q::kQ4_1 ? 4 : 2);
      if (j < 16) qs[j] = static_cast<uint8_t>((qs[j] & 0xf0) | code);
      else qs[j - 16] = static_cast<uint8_t>((qs[j - 16] & 0x0f) | (code << 4));
      want->push_back(type == q::kQ4_1 ? d[b] * code + m[b] : d[b] * kNF4[code]);
    }
    if (type == q::kQ4_1) put16(blk + 2, m_half[b]);
  }
  return bytes;
}

void check_hand_blocks(nfn_ctx* ctx) {
  for (int type : {q::kQ8_0, q::kQ4_1, q::kNF4}) {
    std::vector<double> want;
    const std::vector<uint8_t> bytes = hand_blocks(type, &want);
    std::vector<float> got(64), host(64);
    std::vector<uint16_t> got_bf16(64);
    EXPECT(nfn_dequantize(ctx, got.data(), bytes.data(), static_cast<nfn_qtype>(type), 64, NFN_F32) == NFN_OK,
           "%s", nfn_ctx_last_error(ctx));
    EXPECT(nfn_dequantize(ctx, got_bf16.data(), bytes.data(), static_cast<nfn_qtype>(type), 64, NFN_BF16) == NFN_OK,
           "%s", nfn_ctx_last_error(ctx));
    q::dequantize(type, bytes.data(), 64, host.data());
    for (int i = 0; i < 64; ++i) {
      EXPECT(static_cast<double>(got[i]) == static_cast<double>(static_cast<float>(want[i])),
             "%s value %d: %.9g, the definition gives %.9g", q::type_name(type), i, got[i], want[i]);
      EXPECT(bits_of(host[i]) == bits_of(got[i]), "%s value %d: host and op differ", q::type_name(type), i);
      EXPECT(got_bf16[i] == nfn::f32_to_bf16(got[i]), "%s value %d: bf16 is not the rounded f32",
             q::type_name(type), i);
    }
  }
}

// Rows of random values (some blocks constant, one all zero) quantized and read back.
void check_round_trip(nfn_ctx* ctx) {
  const size_t n = 32 * 40;
  std::vector<float> x = random_vec(n, 5, 3.f);
  for (int j = 0; j < 32; ++j) x[32 * 3 + j] = 0.f, x[32 * 4 + j] = 1.5f;
  x[32 * 5] = 1000.f;  // one outlier in a block
  for (int type : {q::kQ8_0, q::kQ4_1, q::kNF4}) {
    std::vector<uint8_t> bytes(q::bytes_of(type, n));
    q::quantize(type, x.data(), n, bytes.data());
    std::vector<float> y(n);
    EXPECT(nfn_dequantize(ctx, y.data(), bytes.data(), static_cast<nfn_qtype>(type), n, NFN_F32) == NFN_OK, "%s",
           nfn_ctx_last_error(ctx));
    for (size_t b = 0; b < n / 32; ++b) {
      double lo = x[b * 32], hi = x[b * 32], amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::fmin(lo, x[b * 32 + j]), hi = std::fmax(hi, x[b * 32 + j]);
        amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      }
      for (int j = 0; j < 32; ++j) {
        const size_t i = b * 32 + j;
        // Half a step, plus what the scales' rounding to f16 (relative 2^-11) moves the
        // largest code by.
        const double h = 1.0 / 2048;
        double bound;
        if (type == q::kQ8_0) {
          bound = amax / 127 * 0.5 + amax * h;
        } else if (type == q::kQ4_1) {
          bound = (hi - lo) / 15 * 0.5 + (hi - lo) * h + std::fabs(lo) * h;
        } else {  // NF4: the nearest level of x / absmax
          double best = 1e9;
          for (double level : kNF4) best = std::fmin(best, std::fabs(x[i] / amax - level));
          bound = amax == 0 ? 0 : best * amax + amax * h;
        }
        bound = bound * (1 + 1e-6) + 1e-30;
        EXPECT(std::fabs(y[i] - x[i]) <= bound, "%s value %zu: %.7g came back as %.7g (bound %.3g)",
               q::type_name(type), i, x[i], y[i], bound);
      }
    }
    // The zero block is exact, and so is the constant block in Q4_1 (its minimum).
    for (int j = 0; j < 32; ++j) EXPECT(y[32 * 3 + j] == 0.f, "%s: a zero block is not zero", q::type_name(type));
    if (type == q::kQ4_1)
      for (int j = 0; j < 32; ++j) EXPECT(y[32 * 4 + j] == 1.5f, "q4_1: a constant block is not exact");
  }
}

void check_halves() {
  struct Case {
    float f;
    uint16_t h;
  } cases[] = {{0.f, 0x0000}, {-0.f, 0x8000}, {1.f, 0x3C00}, {65504.f, 0x7BFF}, {65520.f, 0x7C00},
               {1.f + 1.f / 2048, 0x3C00},  // a tie between 1 and 1+2^-10: to even (1)
               {1.f + 3.f / 2048, 0x3C02},  // a tie to even upward
               {5.9604644775390625e-8f, 0x0001}, {2.98023223876953125e-8f, 0x0000},  // subnormal, tie to 0
               {6.103515625e-5f, 0x0400}, {-2.f, 0xC000}};
  for (const Case& c : cases) {
    EXPECT(nfn::f32_to_f16(c.f) == c.h, "f32_to_f16(%.9g) = 0x%04x, want 0x%04x", c.f, nfn::f32_to_f16(c.f), c.h);
    if ((c.h & 0x7C00) != 0x7C00)
      EXPECT(nfn::f16_to_f32(nfn::f32_to_f16(c.f)) == nfn::f16_to_f32(c.h), "round trip of %.9g", c.f);
  }
  EXPECT(std::isnan(nfn::f16_to_f32(nfn::f32_to_f16(std::nanf("")))), "NaN stays NaN");
}

void check_bad_arguments(nfn_ctx* ctx) {
  std::vector<uint8_t> bytes(34);
  std::vector<float> out(32);
  expect_invalid(ctx, nfn_dequantize(ctx, out.data(), bytes.data(), static_cast<nfn_qtype>(7), 32, NFN_F32),
                 "dequantize", "an unknown qtype");
  expect_invalid(ctx, nfn_dequantize(ctx, out.data(), bytes.data(), NFN_Q8_0, 31, NFN_F32), "dequantize",
                 "n not a multiple of 32");
  expect_invalid(ctx, nfn_dequantize(ctx, nullptr, bytes.data(), NFN_Q8_0, 32, NFN_F32), "dequantize",
                 "a null output");
  EXPECT(nfn_dequantize(ctx, nullptr, nullptr, NFN_Q4_1, 0, NFN_F32) == NFN_OK, "n = 0 is nothing to do");
  EXPECT(q::parse_type("q4_1") == q::kQ4_1 && q::parse_type("nf4") == q::kNF4 && q::parse_type("q8_0") == q::kQ8_0 &&
             q::parse_type("Q4_1") == -1,
         "parse_type");
}

}  // namespace

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  check_hand_blocks(ctx);
  check_round_trip(ctx);
  check_halves();
  check_bad_arguments(ctx);
  nfn_ctx_destroy(ctx);
  return finish("dequantize_test");
}
