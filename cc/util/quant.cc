#include "cc/util/quant.h"

#include <algorithm>
#include <cmath>

namespace nfn::quant {

int parse_type(const std::string& name) {
  if (name == "q8_0") return kQ8_0;
  if (name == "q4_1") return kQ4_1;
  if (name == "nf4") return kNF4;
  return -1;
}

const char* type_name(int type) { return type == kQ8_0 ? "q8_0" : type == kQ4_1 ? "q4_1" : "nf4"; }

namespace {

void put_half(uint8_t* p, float f) {
  const uint16_t h = f32_to_f16(f);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

void quantize_block(int type, const float* x, uint8_t* out) {
  if (type == kQ8_0) {  // GGML's quantize_row_q8_0_ref
    float amax = 0.f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    put_half(out, d);
    for (int j = 0; j < kBlock; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
    return;
  }
  uint8_t* qs = out + (type == kQ4_1 ? 4 : 2);
  int q[kBlock];
  if (type == kQ4_1) {  // GGML's quantize_row_q4_1_ref
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kBlock; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    const float d = (hi - lo) / 15.f, id = d != 0.f ? 1.f / d : 0.f;
    put_half(out, d);
    put_half(out + 2, lo);
    for (int j = 0; j < kBlock; ++j) q[j] = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - lo) * id + 0.5f)));
  } else {  // NF4: the nearest level of x / absmax (the lower one on a tie)
    float amax = 0.f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    put_half(out, amax);
    const float id = amax != 0.f ? 1.f / amax : 0.f;
    for (int j = 0; j < kBlock; ++j) {
      const float v = x[j] * id;
      int best = 0;
      for (int k = 1; k < 16; ++k)
        if (std::fabs(v - nf4_level(k)) < std::fabs(v - nf4_level(best))) best = k;
      q[j] = best;
    }
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

}  // namespace

void quantize(int type, const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < n / kBlock; ++b) quantize_block(type, x + b * kBlock, out + b * block_bytes(type));
}

void dequantize(int type, const uint8_t* in, size_t n, float* out) {
  for (size_t b = 0; b < n / kBlock; ++b)
    for (int j = 0; j < kBlock; ++j) out[b * kBlock + j] = block_value(type, in + b * block_bytes(type), j);
}

}  // namespace nfn::quant
