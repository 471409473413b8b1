// BOS-aligned best-fit packing, nanochat's pretraining rows (nanochat/dataloader.py, "bos_bestfit"):
// every row of T+1 tokens starts at a document's start and holds whole documents, cropping at
// most its last one, so every token sees its document's beginning and no token is padding.
//
// The stream: the shards in each epoch's shard_order (as the contiguous sampler walks them),
// cut into documents, each from one BOS token up to the next BOS or the shard's end. A
// document never spans shards: the tokens before a shard's first BOS are skipped (the rest of
// a document a shard boundary cut), and a shard's last document ends at the shard's end.
// After the last shard of an epoch the next epoch's order follows, so the buffer may hold
// documents of two epochs at once.
//
// A row: before each choice the buffer is refilled from the stream to `buffer` documents;
// then the LARGEST buffered document that fits the row's remaining room entirely is placed
// (the earliest in buffer order among equals), until none fits; then the SHORTEST buffered
// document (again the earliest among equals) is cropped to fill the row exactly and the rest
// of it is dropped. Placed documents leave the buffer; the others keep their order and new
// ones are appended. Inputs are row[:-1], targets row[1:].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/data/batch_sampler.h"
#include "cc/data/token_shards.h"

namespace nfn::data {

class BestFitSampler : public BatchSampler {
 public:
  static constexpr int64_t kDefaultBuffer = 1000;  // documents, as nanochat's buffer_size

  BestFitSampler() = default;
  BestFitSampler(const BestFitSampler&) = delete;
  BestFitSampler& operator=(const BestFitSampler&) = delete;

  // false + error: B, T or buffer not positive, the shards together hold fewer tokens than one
  // batch of rows (B*(T+1)), or no shard holds a BOS (one line naming the id and the shards).
  bool open(std::vector<TokenShard> shards, int B, int T, uint64_t seed, int64_t bos, int64_t buffer,
            std::string* error);
  void set_vocab_size(int64_t vocab_size) override { vocab_size_ = vocab_size; }
  bool next(int32_t* inputs, int32_t* targets, std::string* error) override;
  // Where the stream reads its next document from (the next BOS at or after it).
  Position position() const override { return pos_; }
  // The stream at p, the buffer empty.
  bool seek(const Position& p, std::string* error) override;
  // Continues a run: the stream at p with `buffered` (documents it read before p, in buffer
  // order) as the buffer. Each must be a document of these shards (starting at a BOS, ending
  // before the next BOS or at its shard's end); else false + error naming the document.
  bool restore(const Position& p, const std::vector<DocumentSpan>& buffered, std::string* error);
  // Whole rows' worth of tokens in one pass: total tokens / (B*(T+1)).
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int token_bytes() const override { return shards_.empty() ? 2 : shards_[0].token_bytes; }
  const std::vector<TokenShard>& shards() const override { return shards_; }
  const std::vector<DocumentSpan>* read_ahead() const override { return &buffer_; }
  int64_t bos() const { return bos_; }
  int64_t buffer_size() const { return buffer_size_; }
  // Tokens placed in rows, and tokens of cropped documents dropped, since open().
  int64_t tokens_placed() const { return placed_; }
  int64_t tokens_cropped() const { return cropped_; }

 private:
  bool fill_row(int32_t* row, std::string* error);
  bool refill(std::string* error);
  bool next_document(DocumentSpan* doc, std::string* error);
  bool first_bos(int64_t shard, int64_t from, int64_t* at, std::string* error);
  bool read_document(const DocumentSpan& doc, int64_t count, int32_t* out, std::string* error);
  bool check_document(const DocumentSpan& doc, std::string* error);

  std::vector<TokenShard> shards_;
  std::vector<int64_t> order_;  // the shard order of pos_.epoch
  int B_ = 0, T_ = 0;
  uint64_t seed_ = 0;
  int64_t bos_ = 0, buffer_size_ = 0, vocab_size_ = 0, batches_per_epoch_ = 0;
  Position pos_;
  std::vector<DocumentSpan> buffer_;
  std::vector<int32_t> row_;
  std::vector<uint8_t> raw_;  // one document's tokens as read
  // The stream scans for BOS ids a chunk at a time: tokens [scan_begin_, + scan_count_) of
  // shards_[scan_shard_] are in scan_raw_.
  ShardFile scan_file_, read_file_;
  int64_t scan_shard_ = -1, scan_begin_ = 0, scan_count_ = 0;
  std::vector<uint8_t> scan_raw_;
  int64_t placed_ = 0, cropped_ = 0;
};

}  // namespace nfn::data
