// What the KV-cached decoders (gpt_decoder.h, decoder_runtime.h) share around their forward:
// each cache slot's position, the last forward's row count, the entry points that check their
// arguments and place a forward's parts in rows, and the head's logits of chosen rows. A model
// supplies its caches, its activations, the forward over placed parts and the head's weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/infer/cached_lm.h"
#include "cc/infer/logit_buffer.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class SlottedLM : public CachedLM {
 public:
  int position() const override { return pos_[0]; }
  void reset() override;
  bool truncate(int position, std::string* error) override { return cut(position, &pos_[0], &rows_, error); }
  bool forward(const int32_t* tokens, int n, std::string* error) override;
  bool logits(bool all_rows, std::vector<float>* out, std::string* error) override;
  bool set_slots(int slots, std::string* error) override;
  int slots() const override { return static_cast<int>(pos_.size()); }
  int slot_position(int slot) const override { return pos_[slot]; }
  bool forward_slots(const std::vector<SlotRows>& parts, const int32_t* tokens, std::string* error) override;
  bool logits_rows(const std::vector<int>& rows, std::vector<float>* out, std::string* error) override;

 protected:
  bool check(nfn_status s, const char* what, std::string* error) const;
  // Frees the caches and allocates them for `slots` sequences, all empty.
  bool resize_slots(int slots, std::string* error);

  // Frees the old caches (if any) and allocates them for `slots` sequences.
  virtual bool alloc_caches(int slots, std::string* error) = 0;
  // Activations for n rows; the device buffer of their n token ids.
  virtual bool ensure_rows(int n, std::string* error) = 0;
  virtual int32_t* token_rows() const = 0;
  // The forward of n rows (their tokens uploaded) made of parts, each at its slot's positions;
  // leaves the final norm's rows in final_rows().
  virtual bool run(const std::vector<PlacedRows>& parts, int n, std::string* error) = 0;
  virtual float* final_rows() const = 0;
  // A buffer of as many rows, free once the forward is done (logits_rows gathers into it).
  virtual float* spare_rows() const = 0;
  virtual int channels() const = 0;
  virtual int padded_vocab() const = 0;
  virtual const void* head() const = 0;  // (padded_vocab, channels)
  virtual float logit_softcap() const { return 0.f; }

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  std::vector<int> pos_ = {0};  // positions in each slot's cache
  int rows_ = 0;                // rows of the last forward
  LogitBuffer logits_;          // (rows, padded_vocab)

 private:
  bool start(const std::vector<PlacedRows>& parts, int n, const int32_t* tokens, std::string* error);
  bool head_logits(const float* x, int rows, std::vector<float>* out, std::string* error);
};

}  // namespace nfn
