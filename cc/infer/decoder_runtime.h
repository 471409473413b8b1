// The modern decoder (nanochat, llama) for generation and scoring, against the op ABI: f32
// parameters and a KV cache of (maxT, NKV*HD) per layer on the backend, nothing for training.
// A CachedLM: forward() runs the same op sequence as the training forward (cc/model/decoder.cc)
// on the new positions, with rotary at their absolute positions, each layer's window over the
// cache, and nanochat's smear fed the previous position's normed embedding (every cached
// position's is kept, so the cache can be cut back). logits() are soft-capped as nanochat's loss sees them.
//
// With a quantization type (cc/util/quant.h: q8_0, q4_1, nf4) the blocks' linear weights (the
// fused qkv, the attention output, the MLP's up and down) stay block-quantized on the backend
// and each is dequantized into one scratch matrix just before its GEMM, so the weights take
// about their quantized size; embeddings, head, norms and gates stay f32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/infer/cached_lm.h"
#include "cc/infer/logit_buffer.h"
#include "cc/model/decoder_config.h"
#include "cc/model/frozen_weights.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class DecoderRuntime : public CachedLM {
 public:
  DecoderRuntime() = default;
  ~DecoderRuntime() override;
  DecoderRuntime(const DecoderRuntime&) = delete;
  DecoderRuntime& operator=(const DecoderRuntime&) = delete;

  // Uploads parameters in decoder_layout order and allocates the cache for max_seq_len
  // positions. Fails with one line when the backend lacks an op the model needs.
  // quant: -1 for f32 weights, else a quant::Type for the block matrices. context > 0 caps the
  // positions the cache holds (a model trained on 8,192 need not hold them all for a chat).
  bool init(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& config, const std::vector<float>& params,
            std::string* error, int quant = -1, int context = 0);
  // Backend bytes the weights take (f32 tensors plus quantized matrices).
  size_t weight_bytes() const { return weights_.bytes(); }
  const DecoderConfig& config() const { return config_; }
  int vocab_size() const override { return config_.vocab_size; }
  int max_seq_len() const override { return context_; }
  int position() const override { return pos_; }
  void reset() override { pos_ = 0; rows_ = 0; }
  bool truncate(int position, std::string* error) override { return cut(position, &pos_, &rows_, error); }
  bool forward(const int32_t* tokens, int n, std::string* error) override;
  bool logits(bool all_rows, std::vector<float>* out, std::string* error) override;
  bool losses(const int32_t* targets, std::vector<float>* out, std::string* error) override;

 private:
  bool check(nfn_status s, const char* what, std::string* error) const;
  bool ensure_rows(int n, bool logits_all, std::string* error);
  bool embed(int n, std::string* error);
  bool layer_forward(int l, int n, std::string* error);
  // An f32 tensor's element `offset` (decoder_layout's numbering) on the backend.
  float* p(size_t offset) const { return static_cast<float*>(weights_.at(offset)); }
  // The f32 matrix that starts at `offset` (a quantized one dequantized for the next GEMM).
  const float* mat(size_t offset, std::string* error);
  void release();

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  DecoderConfig config_;
  DecoderOffsets off_;
  std::vector<int> windows_;
  FrozenWeights weights_;
  void* state_ = nullptr;                   // one allocation: the caches and embs_
  float *k_cache_ = nullptr, *v_cache_ = nullptr;  // (L, maxT, NKV*HD) each
  float* embs_ = nullptr;  // (context, C) nanochat: each cached position's normed embedding
  int context_ = 0;  // positions the cache holds
  int pos_ = 0;   // positions in the cache
  int rows_ = 0;  // rows of the last forward

  // Per-forward buffers for up to cap_rows_ rows (grown on demand; growing drops their contents).
  void* act_block_ = nullptr;
  int cap_rows_ = 0;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  // x: the residual stream; xm: a nanochat block's input; en, x0: the normed embedding and
  // its smear over n+1 rows (row 0 the previous position's); mid: layer L/2's output.
  float *emb_ = nullptr, *en_ = nullptr, *x0_ = nullptr, *x_ = nullptr, *xm_ = nullptr, *h_ = nullptr,
        *rstd_ = nullptr, *qkv_ = nullptr, *qk_rstd_ = nullptr, *ve_ = nullptr, *atty_ = nullptr, *fc_ = nullptr,
        *act_ = nullptr, *mid_ = nullptr, *xb_ = nullptr, *lnf_ = nullptr, *losses_ = nullptr;
  LogitBuffer logits_;  // (rows, Vp)
};

}  // namespace nfn
