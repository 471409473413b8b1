// The dense GPT-2 forward for generation, written against the op ABI: parameters and a KV
// cache on the backend, nothing for training (no gradients, no optimizer state, no saved
// activations). A CachedLM: forward() leaves the final LayerNorm's rows for logits() and
// losses(); forward_slots() runs several sequences' rows, one cache each, through shared GEMMs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/infer/slotted_lm.h"
#include "cc/model/gpt_config.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class GPTDecoder : public SlottedLM {
 public:
  GPTDecoder() = default;
  ~GPTDecoder() override;
  GPTDecoder(const GPTDecoder&) = delete;
  GPTDecoder& operator=(const GPTDecoder&) = delete;

  // Uploads f32 parameters in checkpoint order and allocates the cache for max_seq_len
  // positions. Fails with one line when the backend lacks an op the decoder needs.
  bool init(const nfn_op_table* ops, nfn_ctx* ctx, const GPTConfig& config, const std::vector<float>& params,
            std::string* error);
  const GPTConfig& config() const { return config_; }
  int vocab_size() const override { return config_.vocab_size; }
  int max_seq_len() const override { return config_.max_seq_len; }
  bool losses(const int32_t* targets, std::vector<float>* out, std::string* error) override;

 private:
  bool alloc_caches(int slots, std::string* error) override;
  bool ensure_rows(int n, std::string* error) override;
  int32_t* token_rows() const override { return tokens_; }
  bool run(const std::vector<PlacedRows>& parts, int n, std::string* error) override;
  float* final_rows() const override { return ln_; }
  float* spare_rows() const override { return atty_; }
  int channels() const override { return config_.channels; }
  int padded_vocab() const override { return config_.padded_vocab_size; }
  const void* head() const override;  // the tied token embedding
  void* param(int i, int layer = 0) const;
  void release();

  GPTConfig config_;
  std::vector<size_t> offsets_, per_layer_;  // elements, per parameter tensor
  void* params_ = nullptr;
  float *k_cache_ = nullptr, *v_cache_ = nullptr;  // (slots, L, maxT, C) each, in one allocation

  // Per-forward buffers for up to cap_rows_ rows (grown on demand; growing drops their contents).
  void* act_block_ = nullptr;
  int cap_rows_ = 0;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  float *x_ = nullptr, *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *qkv_ = nullptr, *atty_ = nullptr,
        *fch_ = nullptr, *fch_gelu_ = nullptr, *losses_ = nullptr;
};

}  // namespace nfn
