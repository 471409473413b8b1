// The dense GPT-2 forward for generation, written against the op ABI: parameters and a KV
// cache on the backend, nothing for training (no gradients, no optimizer state, no saved
// activations). A CachedLM: forward() leaves the final LayerNorm's rows for logits() and
// losses().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/infer/cached_lm.h"
#include "cc/infer/logit_buffer.h"
#include "cc/model/gpt_config.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class GPTDecoder : public CachedLM {
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
  int position() const override { return pos_; }
  void reset() override { pos_ = 0; rows_ = 0; }
  bool truncate(int position, std::string* error) override { return cut(position, &pos_, &rows_, error); }
  bool forward(const int32_t* tokens, int n, std::string* error) override;
  bool logits(bool all_rows, std::vector<float>* out, std::string* error) override;
  bool losses(const int32_t* targets, std::vector<float>* out, std::string* error) override;

 private:
  bool check(nfn_status s, const char* what, std::string* error) const;
  bool ensure_rows(int n, bool logits_all, std::string* error);
  void* param(int i, int layer = 0) const;
  void release();

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  GPTConfig config_;
  std::vector<size_t> offsets_, per_layer_;  // elements, per parameter tensor
  void* params_ = nullptr;
  float *k_cache_ = nullptr, *v_cache_ = nullptr;  // (L, maxT, C) each, in one allocation
  int pos_ = 0;   // positions in the cache
  int rows_ = 0;  // rows of the last forward

  // Per-forward buffers for up to cap_rows_ rows (grown on demand; growing drops their contents).
  void* act_block_ = nullptr;
  int cap_rows_ = 0;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  float *x_ = nullptr, *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *qkv_ = nullptr, *atty_ = nullptr,
        *fch_ = nullptr, *fch_gelu_ = nullptr, *losses_ = nullptr;
  LogitBuffer logits_;  // (rows, Vp)
};

}  // namespace nfn
