#include "cc/model/frozen_weights.h"

#include <algorithm>

#include "cc/ops/op_error.h"
#include "cc/util/bf16.h"
#include "cc/util/quant.h"

namespace nfn {

void FrozenWeights::release() {
  if (ops_ != nullptr) {
    if (packed_) ops_->free(ctx_, packed_);
    if (qblob_) ops_->free(ctx_, qblob_);
    if (scratch_) ops_->free(ctx_, scratch_);
  }
  packed_ = scratch_ = nullptr;
  qblob_ = nullptr;
  packed_at_.clear();
  quantized_.clear();
  bytes_ = 0;
}

bool FrozenWeights::upload(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& c,
                           const std::vector<float>& params, nfn_dtype dtype, int quant, std::string* error) {
  release();
  ops_ = ops;
  ctx_ = ctx;
  dtype_ = dtype;
  esize_ = dtype == NFN_F32 ? 4 : 2;
  quant_ = quant;
  auto check = [&](nfn_status s, const char* what) {
    if (s == NFN_OK) return true;
    *error = op_error(*ops_, ctx_, what);
    return false;
  };
  std::vector<DecoderMatrix> matrices;
  if (quant >= 0)
    for (const DecoderOffsets::Layer& w : decoder_offsets(c).layers)
      for (const DecoderMatrix& m : layer_matrices(c, w))
        if (m.cols % quant::kBlock == 0) matrices.push_back(m);
  auto in_matrix = [&](size_t offset) {
    for (const DecoderMatrix& m : matrices)
      if (offset >= m.offset && offset < m.offset + static_cast<size_t>(m.rows) * m.cols) return true;
    return false;
  };
  std::vector<uint8_t> packed;  // the unquantized tensors, in the op dtype
  std::vector<std::pair<size_t, size_t>> placed;  // (layout offset, byte in packed)
  for (const DecoderTensor& t : decoder_layout(c)) {
    if (in_matrix(t.offset)) continue;
    placed.emplace_back(t.offset, packed.size());
    const float* src = params.data() + t.offset;
    if (dtype == NFN_F32) {
      packed.insert(packed.end(), reinterpret_cast<const uint8_t*>(src),
                    reinterpret_cast<const uint8_t*>(src + t.count()));
    } else {
      for (size_t i = 0; i < t.count(); ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        packed.push_back(static_cast<uint8_t>(h & 0xff));
        packed.push_back(static_cast<uint8_t>(h >> 8));
      }
    }
  }
  std::vector<uint8_t> blob;
  size_t largest = 0;
  for (const DecoderMatrix& m : matrices) {
    const size_t n = static_cast<size_t>(m.rows) * m.cols;
    quantized_[m.offset] = {blob.size(), n};
    blob.resize(blob.size() + quant::bytes_of(quant, n));
    quant::quantize(quant, params.data() + m.offset, n, blob.data() + quantized_[m.offset].byte);
    largest = std::max(largest, n);
  }
  if (!check(ops_->alloc(ctx_, packed.size(), &packed_), "allocating the weights")) return false;
  for (const auto& [offset, byte] : placed) packed_at_[offset] = static_cast<char*>(packed_) + byte;
  bytes_ = packed.size() + blob.size();
  if (!check(ops_->copy(ctx_, packed_, packed.data(), packed.size(), NFN_HOST_TO_DEVICE), "uploading the weights"))
    return false;
  if (blob.empty()) return true;
  void* q = nullptr;
  if (!check(ops_->alloc(ctx_, blob.size(), &q), "allocating quantized weights")) return false;
  qblob_ = static_cast<uint8_t*>(q);
  return check(ops_->alloc(ctx_, largest * esize_, &scratch_), "allocating the dequantized matrix") &&
         check(ops_->copy(ctx_, qblob_, blob.data(), blob.size(), NFN_HOST_TO_DEVICE), "uploading quantized weights");
}

const void* FrozenWeights::matrix(size_t offset, std::string* error) const {
  auto it = quantized_.find(offset);
  if (it == quantized_.end()) return at(offset);
  if (ops_->dequantize(ctx_, scratch_, qblob_ + it->second.byte, static_cast<nfn_qtype>(quant_), it->second.n,
                       dtype_) != NFN_OK) {
    *error = op_error(*ops_, ctx_, "dequantize");
    return nullptr;
  }
  return scratch_;
}

}  // namespace nfn
