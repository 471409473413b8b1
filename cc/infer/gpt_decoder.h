// The dense GPT-2 forward for generation, written against the op ABI: parameters and a KV
// cache on the backend, nothing for training (no gradients, no optimizer state, no saved
// activations). Each forward() runs the next block of tokens at positions [position(),
// position()+n), appends their keys and values to the cache, and leaves the final
// LayerNorm's rows for logits() and losses().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/gpt_config.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class GPTDecoder {
 public:
  GPTDecoder() = default;
  ~GPTDecoder();
  GPTDecoder(const GPTDecoder&) = delete;
  GPTDecoder& operator=(const GPTDecoder&) = delete;

  // Uploads f32 parameters in checkpoint order and allocates the cache for max_seq_len
  // positions. Fails with one line when the backend lacks an op the decoder needs.
  bool init(const nfn_op_table* ops, nfn_ctx* ctx, const GPTConfig& config, const std::vector<float>& params,
            std::string* error);
  const GPTConfig& config() const { return config_; }
  int position() const { return pos_; }
  void reset() { pos_ = 0; rows_ = 0; }

  // Token ids must be in [0, vocab_size); the block must fit in the context.
  bool forward(const int32_t* tokens, int n, std::string* error);
  // Logits (vocab_size floats per row) of the last forward: its last row, or all of its rows.
  bool logits(bool all_rows, std::vector<float>* out, std::string* error);
  // Cross-entropy (nats) of each row of the last forward against targets (n ids).
  bool losses(const int32_t* targets, std::vector<float>* out, std::string* error);

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
  int cap_rows_ = 0, cap_logit_rows_ = 0;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  float *x_ = nullptr, *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *qkv_ = nullptr, *atty_ = nullptr,
        *fch_ = nullptr, *fch_gelu_ = nullptr, *losses_ = nullptr;
  float* logits_ = nullptr;  // (cap_logit_rows_, Vp), a separate allocation
};

}  // namespace nfn
