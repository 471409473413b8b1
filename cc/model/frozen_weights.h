// A decoder's weights that nothing trains: what the inference runtime reads, and the frozen base
// under LoRA adapters. The tensors are packed into one backend block in the op dtype (f32, or bf16
// rounded to nearest even), except the blocks' linear matrices (each layer's fused qkv, attention
// output, MLP up and down) when a quantization type is given: those stay block-quantized
// (cc/util/quant.h) and matrix() dequantizes one into a scratch buffer for the GEMM that follows.
// kMatricesBf16 in place of a quantization type keeps those matrices as bf16 words (rounded to
// nearest even), widened by the convert op the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "cc/model/decoder_config.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

// FrozenWeights::upload's quant for block matrices kept in bf16 (not a quant::Type).
constexpr int kMatricesBf16 = -2;

class FrozenWeights {
 public:
  FrozenWeights() = default;
  ~FrozenWeights() { release(); }
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;

  // params: f32 in decoder_layout order. quant: -1 (none), a quant::Type or kMatricesBf16.
  bool upload(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& config, const std::vector<float>& params,
              nfn_dtype dtype, int quant, std::string* error);
  void release();
  // Element `offset` (decoder_layout's numbering) of a tensor kept unquantized.
  void* at(size_t offset) const {
    auto it = std::prev(packed_at_.upper_bound(offset));
    return static_cast<char*>(it->second) + (offset - it->first) * esize_;
  }
  // The matrix that starts at `offset`, ready for a GEMM: a quantized one dequantized into the
  // scratch buffer (valid until the next matrix() call's dequantization runs). NULL, with
  // *error, when the dequantization fails.
  const void* matrix(size_t offset, std::string* error) const;
  bool quantized(size_t offset) const { return quantized_.count(offset) != 0; }
  size_t bytes() const { return bytes_; }

 private:
  struct Quantized {
    size_t byte, n;  // where in qblob_, how many values
  };
  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  nfn_dtype dtype_ = NFN_F32;
  size_t esize_ = 4;
  int quant_ = -1;
  void* packed_ = nullptr;
  std::map<size_t, void*> packed_at_;     // each unquantized tensor's start -> its place
  std::map<size_t, Quantized> quantized_;  // each quantized matrix's start -> its blocks
  uint8_t* qblob_ = nullptr;
  void* scratch_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace nfn
