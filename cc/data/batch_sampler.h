// What the training loop reads its batches from: B x T inputs and targets at a time, from a
// place in the shard stream that a checkpoint saves and a resume seeks back to. Two samplers
// implement it: llm.c's contiguous windows (token_shards.h) and BOS-aligned best-fit rows
// (best_fit.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nfn::data {

struct TokenShard;

// `length` tokens from token `offset` of shards[shard] (the sampler's list, sorted by name):
// one document, from its BOS up to the next BOS or the shard's end.
struct DocumentSpan {
  int64_t shard = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const DocumentSpan& o) const {
    return shard == o.shard && offset == o.offset && length == o.length;
  }
};

class BatchSampler {
 public:
  // The next token the sampler reads from its shards. `shard` indexes the epoch's order
  // (shard_order), not the sorted list. Saved in checkpoints (the state file's data position).
  struct Position {
    int64_t epoch = 0;
    int64_t shard = 0;
    int64_t offset = 0;
  };

  virtual ~BatchSampler() = default;
  // Optional: reject token ids >= vocab_size in every batch read (0 turns the check off).
  virtual void set_vocab_size(int64_t vocab_size) = 0;
  virtual bool next(int32_t* inputs, int32_t* targets, std::string* error) = 0;  // B*T ids each
  virtual Position position() const = 0;
  // Reads on from `p` with nothing read ahead; validates ranges.
  virtual bool seek(const Position& p, std::string* error) = 0;
  // Batches one pass over the shards gives (best fit: whole rows' worth of tokens, B*(T+1)
  // each); validation reads at most this many.
  virtual int64_t batches_per_epoch() const = 0;
  virtual int token_bytes() const = 0;
  virtual const std::vector<TokenShard>& shards() const = 0;
  // Documents read from the stream before position() and not yet used, in the order the
  // sampler keeps them (best fit's buffer); null where the sampler reads nothing ahead.
  virtual const std::vector<DocumentSpan>* read_ahead() const { return nullptr; }
};

}  // namespace nfn::data
