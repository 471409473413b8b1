#include "cc/data/best_fit.h"

#include <algorithm>

namespace nfn::data {
namespace {

// Tokens the stream reads at a time while it looks for the next BOS.
constexpr int64_t kScanChunk = int64_t{1} << 16;

bool fail(std::string* error, const std::string& where, const std::string& what) {
  if (error) *error = where + ": " + what;
  return false;
}

std::string describe(const DocumentSpan& d) {
  return "shard " + std::to_string(d.shard) + ", offset " + std::to_string(d.offset) + ", length " +
         std::to_string(d.length);
}

// nanochat's choice for a row with `room` tokens left: the largest document that fits whole
// (the first of equals), else the shortest (the first of equals), which is cropped.
size_t choose(const std::vector<DocumentSpan>& buffer, int64_t room) {
  size_t best = buffer.size(), shortest = 0;
  int64_t best_length = 0;
  for (size_t i = 0; i < buffer.size(); ++i) {
    const int64_t length = buffer[i].length;
    if (length <= room && length > best_length) {
      best = i;
      best_length = length;
    }
    if (length < buffer[shortest].length) shortest = i;
  }
  return best < buffer.size() ? best : shortest;
}

}  // namespace

bool BestFitSampler::open(std::vector<TokenShard> shards, int B, int T, uint64_t seed, int64_t bos, int64_t buffer,
                          std::string* error) {
  if (B <= 0 || T <= 0) {
    return fail(error, "batch",
                "B and T must be positive (got B=" + std::to_string(B) + ", T=" + std::to_string(T) + ")");
  }
  if (buffer <= 0)
    return fail(error, "batch", "a buffer of " + std::to_string(buffer) + " documents: best-fit packing needs one");
  if (bos < 0) return fail(error, "batch", "BOS id " + std::to_string(bos) + ": best-fit packing needs a token id");
  if (!check_shards(shards, error)) return false;
  shards_ = std::move(shards);
  scan_file_.close();
  read_file_.close();
  scan_shard_ = -1;
  B_ = B;
  T_ = T;
  seed_ = seed;
  bos_ = bos;
  buffer_size_ = buffer;
  const int64_t batch = static_cast<int64_t>(B) * (T + 1);
  batches_per_epoch_ = total_tokens(shards_) / batch;
  if (batches_per_epoch_ == 0) {
    return fail(error, shards_[0].path, "the shards hold " + std::to_string(total_tokens(shards_)) +
                                            " tokens, fewer than one batch of best-fit rows, B*(T+1) = " +
                                            std::to_string(batch));
  }
  // Some shard must hold a document, or the stream would look for one forever.
  bool found = false;
  for (int64_t s = 0; s < static_cast<int64_t>(shards_.size()) && !found; ++s) {
    int64_t at = 0;
    if (!first_bos(s, 0, &at, error)) return false;
    found = at < shards_[s].num_tokens;
  }
  if (!found) {
    return fail(error, shards_[0].path, "no document start: BOS id " + std::to_string(bos) + " is in none of the " +
                                            std::to_string(shards_.size()) + " shards, so best-fit packing finds no "
                                            "documents (the trainer's --eot-token names the id)");
  }
  row_.assign(static_cast<size_t>(T) + 1, 0);
  placed_ = cropped_ = 0;
  return seek(Position{}, error);
}

bool BestFitSampler::seek(const Position& p, std::string* error) {
  if (shards_.empty()) return fail(error, "batch", "sampler is not open");
  if (!check_position(shards_, seed_, p, error)) return false;
  order_ = shard_order(static_cast<int64_t>(shards_.size()), seed_, p.epoch);
  pos_ = p;
  buffer_.clear();
  return true;
}

bool BestFitSampler::restore(const Position& p, const std::vector<DocumentSpan>& buffered, std::string* error) {
  if (!seek(p, error)) return false;
  for (size_t i = 0; i < buffered.size(); ++i) {
    if (!check_document(buffered[i], error)) {
      *error = "buffered document " + std::to_string(i) + " (" + describe(buffered[i]) + "): " + *error;
      return false;
    }
  }
  buffer_ = buffered;
  return true;
}

// A span of these shards that is a whole document: a BOS at its start, the next BOS or the
// shard's end right after it.
bool BestFitSampler::check_document(const DocumentSpan& d, std::string* error) {
  const int64_t n = static_cast<int64_t>(shards_.size());
  if (d.shard < 0 || d.shard >= n) return fail(error, "shard", "out of range for " + std::to_string(n) + " shards");
  const TokenShard& s = shards_[d.shard];
  if (d.offset < 0 || d.length < 1 || d.offset + d.length > s.num_tokens)
    return fail(error, s.path, "not a token range of its " + std::to_string(s.num_tokens) + " tokens");
  int64_t start = 0, end = 0;
  if (!first_bos(d.shard, d.offset, &start, error) || !first_bos(d.shard, d.offset + 1, &end, error)) return false;
  if (start != d.offset || end != d.offset + d.length)
    return fail(error, s.path, "not a document of BOS id " + std::to_string(bos_) + " (another tokenizer's shards?)");
  return true;
}

// The first BOS in tokens [from, end) of shards_[shard], else the shard's token count.
bool BestFitSampler::first_bos(int64_t shard, int64_t from, int64_t* at, std::string* error) {
  const TokenShard& s = shards_[shard];
  for (int64_t i = from; i < s.num_tokens;) {
    if (scan_shard_ != shard || i < scan_begin_ || i >= scan_begin_ + scan_count_) {
      const int64_t count = std::min(kScanChunk, s.num_tokens - i);
      scan_raw_.resize(static_cast<size_t>(count) * s.token_bytes);
      scan_shard_ = -1;
      if (!scan_file_.read(s, i, count, scan_raw_.data(), error)) return false;
      scan_shard_ = shard;
      scan_begin_ = i;
      scan_count_ = count;
    }
    for (const int64_t end = scan_begin_ + scan_count_; i < end; ++i) {
      if (token_id(scan_raw_.data(), i - scan_begin_, s.token_bytes) == bos_) {
        *at = i;
        return true;
      }
    }
  }
  *at = s.num_tokens;
  return true;
}

// The stream's next document; the stream moves past it. A shard with no document left gives
// way to the next one in the epoch's order, the last shard to the next epoch.
bool BestFitSampler::next_document(DocumentSpan* doc, std::string* error) {
  const int64_t n = static_cast<int64_t>(shards_.size());
  // Any 2n shards in a row hold a whole epoch, so 2n without a document means none is left
  // (open() found one: only shards changed since can do that).
  for (int64_t visited = 0; visited <= 2 * n; ++visited) {
    if (pos_.shard >= n) {
      if (pos_.epoch == kMaxEpoch) return fail(error, "data position", "epoch counter at its end");
      ++pos_.epoch;
      pos_.shard = 0;
      pos_.offset = 0;
      order_ = shard_order(n, seed_, pos_.epoch);
    }
    const int64_t shard = order_[pos_.shard];
    int64_t start = 0, end = 0;
    if (!first_bos(shard, pos_.offset, &start, error)) return false;
    if (start < shards_[shard].num_tokens) {
      if (!first_bos(shard, start + 1, &end, error)) return false;
      *doc = DocumentSpan{shard, start, end - start};
      pos_.offset = end;
      return true;
    }
    ++pos_.shard;
    pos_.offset = 0;
  }
  return fail(error, shards_[0].path, "no document start (BOS id " + std::to_string(bos_) + ") left in any shard");
}

bool BestFitSampler::refill(std::string* error) {
  while (static_cast<int64_t>(buffer_.size()) < buffer_size_) {
    DocumentSpan doc;
    if (!next_document(&doc, error)) return false;
    buffer_.push_back(doc);
  }
  return true;
}

// The first `count` tokens of a document, widened and checked against the vocabulary.
bool BestFitSampler::read_document(const DocumentSpan& doc, int64_t count, int32_t* out, std::string* error) {
  const TokenShard& s = shards_[doc.shard];
  raw_.resize(static_cast<size_t>(count) * s.token_bytes);
  return read_file_.read(s, doc.offset, count, raw_.data(), error) &&
         widen_ids(s, raw_.data(), doc.offset, count, vocab_size_, out, error);
}

bool BestFitSampler::fill_row(int32_t* row, std::string* error) {
  const int64_t capacity = static_cast<int64_t>(T_) + 1;
  for (int64_t at = 0; at < capacity;) {
    if (!refill(error)) return false;
    const size_t pick = choose(buffer_, capacity - at);
    const DocumentSpan doc = buffer_[pick];
    const int64_t take = std::min(doc.length, capacity - at);
    if (!read_document(doc, take, row + at, error)) return false;
    buffer_.erase(buffer_.begin() + static_cast<std::ptrdiff_t>(pick));
    at += take;
    placed_ += take;
    cropped_ += doc.length - take;
  }
  return true;
}

bool BestFitSampler::next(int32_t* inputs, int32_t* targets, std::string* error) {
  if (shards_.empty()) return fail(error, "batch", "sampler is not open");
  for (int r = 0; r < B_; ++r) {
    if (!fill_row(row_.data(), error)) return false;
    std::copy(row_.begin(), row_.end() - 1, inputs + static_cast<int64_t>(r) * T_);
    std::copy(row_.begin() + 1, row_.end(), targets + static_cast<int64_t>(r) * T_);
  }
  return true;
}

}  // namespace nfn::data
