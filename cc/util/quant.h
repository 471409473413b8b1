// Block-quantized weights: rows of values in blocks of 32, each block a few scale bytes and
// 32 small integers. The formats are GGML's Q8_0 and Q4_1 (what GGUF files hold) and NF4,
// QLoRA's 4-bit normal-float codebook in Q4_0's block layout:
//   Q8_0  34 bytes: f16 d, 32 int8 q;                      x = d q
//   Q4_1  20 bytes: f16 d, f16 m, 16 bytes of nibbles;     x = d q + m   (q in 0..15)
//   NF4   18 bytes: f16 d (the absmax), 16 bytes of nibbles; x = d NF4[q]
// Byte j of a nibble block holds value j in its low nibble and value j + 16 in its high one.
// block_value() is the one formula every library uses (the CPU op and the CUDA kernel include
// it), so a value dequantizes to the same bits everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cc/util/f16.h"

#define NFN_QUANT_FN NFN_HOST_DEVICE inline

namespace nfn::quant {

constexpr int kBlock = 32;
enum Type : int { kQ8_0 = 0, kQ4_1 = 1, kNF4 = 2 };

NFN_QUANT_FN size_t block_bytes(int type) { return type == kQ8_0 ? 34 : type == kQ4_1 ? 20 : 18; }
NFN_QUANT_FN bool valid_type(int type) { return type == kQ8_0 || type == kQ4_1 || type == kNF4; }
// Bytes of n values (n a multiple of 32).
NFN_QUANT_FN size_t bytes_of(int type, size_t n) { return n / kBlock * block_bytes(type); }

// QLoRA's NF4 levels (bitsandbytes' table), ascending.
NFN_QUANT_FN float nf4_level(int q) {
  const float levels[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                            -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                            0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                            0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                            0.7229568362236023f, 1.0f};
  return levels[q];
}

// Value j (0..31) of the block at `block`.
NFN_QUANT_FN float block_value(int type, const uint8_t* block, int j) {
  const float d = f16_to_f32(static_cast<uint16_t>(block[0] | (block[1] << 8)));
  if (type == kQ8_0) return d * static_cast<float>(static_cast<int8_t>(block[2 + j]));
  const uint8_t* qs = block + (type == kQ4_1 ? 4 : 2);
  const int q = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
  if (type == kNF4) return d * nf4_level(q);
  const float m = f16_to_f32(static_cast<uint16_t>(block[2] | (block[3] << 8)));
  return fmaf(d, static_cast<float>(q), m);
}

// Host side (quant.cc).
// "q8_0", "q4_1", "nf4" -> a type; -1 for any other name.
int parse_type(const std::string& name);
const char* type_name(int type);
// Quantizes n values (n a multiple of 32) into bytes_of(type, n) bytes: GGML's reference
// rounding for Q8_0 and Q4_1; NF4's nearest level of x / absmax.
void quantize(int type, const float* x, size_t n, uint8_t* out);
void dequantize(int type, const uint8_t* in, size_t n, float* out);

}  // namespace nfn::quant
