// llm.c-format token shards: find and validate them, then read contiguous training batches.
//
// A shard is a 1024-byte header (256 int32: magic, version, token count) followed by the
// tokens: uint16 (magic 20240520, version 1) or uint32 (magic 20240801, version 7).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/data/batch_sampler.h"

namespace nfn::data {

constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;

struct TokenShard {
  std::string path;
  int64_t num_tokens = 0;
  int token_bytes = 2;  // 2: uint16 (magic 20240520, version 1); 4: uint32 (magic 20240801, version 7)
};

// Reads and validates one shard's header and exact file size.
bool read_shard_header(const std::string& path, TokenShard* out, std::string* error);

// The files a split names: a directory's *_<split>_*.bin and *_<split>.bin (sorted by name), or
// the one file given (split ignored). Not read; false + error where the path cannot be opened
// or a directory holds none.
bool list_shard_files(const std::string& dir_or_file, const std::string& split, std::vector<std::string>* paths,
                      std::string* error);
// The *_val*.bin files beside a *_train*.bin one (see find_validation_siblings), not read.
bool validation_sibling_files(const std::string& train_path, std::vector<std::string>* paths, std::string* error);

// A directory (every *_<split>_*.bin or *_<split>.bin inside, sorted by name) or one shard
// file (split ignored). Validates each header and exact file size (1024 + token_bytes*ntok);
// token counts come from headers. false + *error = "<path>: <what is wrong>" on any problem
// (no shards found included).
bool find_shards(const std::string& dir_or_file, const std::string& split,
                 std::vector<TokenShard>* out, std::string* error);

// "x/shakespeare_train_000003.bin" -> the sorted *_val*.bin shards beside it with the same name
// prefix ("x/shakespeare_val_000000.bin", ...; llm.c's "fineweb_train_000000.bin" ->
// "fineweb_val_000000.bin"; "TinyStories_train.bin" -> "TinyStories_val.bin").
bool find_validation_siblings(const std::string& train_path, std::vector<TokenShard>* out,
                              std::string* error);

int64_t total_tokens(const std::vector<TokenShard>& shards);

// What a sampler takes: at least one shard, each 2 or 4 bytes a token, all the same width, no
// negative count. false + error naming the shard otherwise.
bool check_shards(const std::vector<TokenShard>& shards, std::string* error);

// The shard visiting order of one epoch: sorted when seed is 0, otherwise a Fisher-Yates
// shuffle driven by splitmix64 seeded with seed ^ (epoch * 0x9E3779B97F4A7C15), swapping
// i with (next() % (i + 1)) for i from n-1 down to 1. Written out so other readers can match it.
std::vector<int64_t> shard_order(int64_t num_shards, uint64_t seed, int64_t epoch);

// Epochs past this come only from a damaged or hand-made position: refused, so that the epoch
// counter never wraps (2^62 more epochs would be needed).
constexpr int64_t kMaxEpoch = INT64_MAX / 2;
// Whether `p` is a place in `shards` (its shard within range, its offset within that shard
// of epoch p.epoch's order); false + error naming what is out of range.
bool check_position(const std::vector<TokenShard>& shards, uint64_t seed, const BatchSampler::Position& p,
                    std::string* error);

// One shard file open for reading token ranges; opened on first use and again when another
// shard is asked for. Errors name the file.
class ShardFile {
 public:
  ShardFile() = default;
  ~ShardFile();
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  // Tokens [offset, offset + count) of `shard`, raw (token_bytes each), into dst.
  bool read(const TokenShard& shard, int64_t offset, int64_t count, void* dst, std::string* error);
  void close();  // the next read opens its file again

 private:
  int fd_ = -1;
  std::string path_;
};

// Token i of raw ids `token_bytes` wide.
inline int64_t token_id(const uint8_t* raw, int64_t i, int token_bytes) {
  if (token_bytes == 2) return static_cast<int64_t>(raw[2 * i]) | static_cast<int64_t>(raw[2 * i + 1]) << 8;
  return static_cast<int64_t>(raw[4 * i]) | static_cast<int64_t>(raw[4 * i + 1]) << 8 |
         static_cast<int64_t>(raw[4 * i + 2]) << 16 | static_cast<int64_t>(raw[4 * i + 3]) << 24;
}

// Widens `count` raw ids read from `shard` at token `first` into out, refusing an id of
// vocab_size or more (vocab_size > 0) or past int32, with an error naming the file and token.
bool widen_ids(const TokenShard& shard, const uint8_t* raw, int64_t first, int64_t count, int64_t vocab_size,
               int32_t* out, std::string* error);

// Contiguous batches as llm.c's dataloader: each batch is B*T+1 consecutive tokens of one
// shard; inputs are the first B*T, targets the same shifted by one; the offset then advances
// by B*T. A shard too short for the next window is skipped; after the last shard the epoch
// ends and the next one starts. Shard order per epoch is shard_order(n, seed, epoch).
class TokenBatchSampler : public BatchSampler {
 public:
  TokenBatchSampler() = default;
  TokenBatchSampler(const TokenBatchSampler&) = delete;
  TokenBatchSampler& operator=(const TokenBatchSampler&) = delete;

  // false + error if no shard holds B*T+1 tokens.
  bool open(std::vector<TokenShard> shards, int B, int T, uint64_t seed, std::string* error);
  void set_vocab_size(int64_t vocab_size) override { vocab_size_ = vocab_size; }
  bool next(int32_t* inputs, int32_t* targets, std::string* error) override;  // B*T ids each
  // Raw bytes of the last window (B*T+1 tokens of token_bytes each), for device upload.
  const std::vector<uint8_t>& last_window() const { return window_; }
  Position position() const override { return pos_; }  // where the NEXT batch starts
  // Restore; validates ranges (an epoch up to kMaxEpoch, so that the counter never wraps).
  bool seek(const Position& p, std::string* error) override;
  static constexpr int64_t kMaxEpoch = data::kMaxEpoch;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int token_bytes() const override { return shards_.empty() ? 2 : shards_[0].token_bytes; }
  const std::vector<TokenShard>& shards() const override { return shards_; }

 private:
  int64_t window_tokens() const { return static_cast<int64_t>(B_) * T_ + 1; }
  bool fits(int64_t shard_index_in_order, int64_t offset) const;
  void skip_to_valid_window();  // moves pos_ forward past shards too short for a window

  std::vector<TokenShard> shards_;
  std::vector<int64_t> order_;
  int B_ = 0, T_ = 0;
  uint64_t seed_ = 0;
  int64_t vocab_size_ = 0;
  int64_t batches_per_epoch_ = 0;
  Position pos_;
  std::vector<uint8_t> window_;
  std::vector<int32_t> ids_;  // the window widened
  ShardFile file_;
};

}  // namespace nfn::data
