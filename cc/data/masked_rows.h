// Masked-row shards: supervised fine-tuning's rows (nfn sft writes them), each a fixed row of
// tokens that starts with BOS plus a loss mask, so the training loop trains on conversations
// as it trains on token windows: inputs are row[:-1], targets row[1:] with -1 where the
// shifted mask is 0 (the cross-entropy skips those).
//
// A file: 256 little-endian int32 (1024 bytes), then `rows` records of R tokens (uint16 or
// uint32) followed by R mask bytes (0 or 1), so its size is exactly 1024 + rows * R * (width + 1).
//   [0] 20261215 (magic)  [1] 1 (version)  [2] R, tokens a row (T + 1)  [3] token width in
//   bytes, 2 or 4  [4] the BOS id every row starts with  [6] rows, an int64 (words 6 and 7)
//   the rest 0.
// Names as token shards': {name}_train_000000.bin, {name}_val_000000.bin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/data/batch_sampler.h"
#include "cc/data/token_shards.h"

namespace nfn::data {

constexpr int32_t kMaskedRowMagic = 20261215;
constexpr int32_t kMaskedRowVersion = 1;

struct MaskedRowShard {
  std::string path;
  int64_t rows = 0;
  int row_tokens = 0;  // R
  int token_bytes = 2;
  int64_t bos = 0;
  int64_t row_bytes() const { return static_cast<int64_t>(row_tokens) * (token_bytes + 1); }
};

// Whether `path` begins with the masked-row magic (false where it cannot be read).
bool is_masked_row_file(const std::string& path);
// Reads and checks one file's header and its exact size; errors are "<path>: <what>", naming
// the field.
bool read_masked_row_header(const std::string& path, MaskedRowShard* out, std::string* error);
// Every masked-row file of a split (a directory's *_<split>_*.bin, or the one file), each
// checked; all must share R, the token width and the BOS id.
bool find_masked_row_shards(const std::string& dir_or_file, const std::string& split,
                            std::vector<MaskedRowShard>* out, std::string* error);
// The same for a list of files already named.
bool read_masked_row_headers(const std::vector<std::string>& paths, std::vector<MaskedRowShard>* out,
                             std::string* error);

// B rows at a time, in file order within a file and the files in each epoch's shard_order (as
// the contiguous sampler visits its shards). Training reads on across epochs without a break;
// with pad_epoch_end (validation), the last batch of an epoch is filled up with rows that train
// nothing (BOS inputs, every target -1), so one epoch is ceil(rows / B) batches holding each
// row once. Position: epoch, shard (index into the epoch's order), offset = the next row.
class MaskedRowSampler : public BatchSampler {
 public:
  MaskedRowSampler() = default;
  ~MaskedRowSampler() override;
  MaskedRowSampler(const MaskedRowSampler&) = delete;
  MaskedRowSampler& operator=(const MaskedRowSampler&) = delete;

  // false + error: no rows, or rows that are not T + 1 tokens.
  bool open(std::vector<MaskedRowShard> shards, int B, int T, uint64_t seed, bool pad_epoch_end, std::string* error);
  void set_vocab_size(int64_t vocab_size) override { vocab_size_ = vocab_size; }
  // A row whose first token is not BOS, a mask byte other than 0 or 1, or an id out of the
  // vocabulary is an error naming the file and the row.
  bool next(int32_t* inputs, int32_t* targets, std::string* error) override;
  Position position() const override { return pos_; }
  bool seek(const Position& p, std::string* error) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int token_bytes() const override { return files_.empty() ? 2 : files_[0].token_bytes; }
  // As token shards of rows x R tokens each (the checkpoint's record of what a run read).
  const std::vector<TokenShard>& shards() const override { return as_token_shards_; }
  const std::vector<MaskedRowShard>& files() const { return files_; }
  int64_t total_rows() const { return total_rows_; }

 private:
  bool read_row(const MaskedRowShard& f, int64_t row, int32_t* inputs, int32_t* targets, std::string* error);
  void skip_empty();  // past files with no rows left, into the next epoch after the last

  std::vector<MaskedRowShard> files_;
  std::vector<TokenShard> as_token_shards_;
  std::vector<int64_t> order_;
  int B_ = 0, T_ = 0;
  uint64_t seed_ = 0;
  bool pad_epoch_end_ = false;
  int64_t vocab_size_ = 0, total_rows_ = 0, batches_per_epoch_ = 0;
  Position pos_;
  std::vector<uint8_t> raw_;  // one row's record
  int fd_ = -1;
  std::string open_path_;
};

}  // namespace nfn::data
