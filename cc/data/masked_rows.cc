#include "cc/data/masked_rows.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nfn::data {
namespace {

bool fail(std::string* error, const std::string& path, const std::string& what) {
  if (error) *error = path + ": " + what;
  return false;
}

bool read_exact(int fd, void* buf, size_t n, int64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

// Opens a regular file for reading without blocking on a FIFO; -1 with the error set.
int open_regular(const std::string& path, int64_t* size, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(error, path, std::string("cannot open: ") + std::strerror(errno)), -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(error, path, "not a regular file"), -1;
  }
  *size = st.st_size;
  return fd;
}

}  // namespace

bool is_masked_row_file(const std::string& path) {
  int64_t size = 0;
  std::string ignored;
  const int fd = open_regular(path, &size, &ignored);
  if (fd < 0) return false;
  int32_t magic = 0;
  const bool got = size >= 4 && read_exact(fd, &magic, 4, 0);
  ::close(fd);
  return got && magic == kMaskedRowMagic;
}

bool read_masked_row_header(const std::string& path, MaskedRowShard* out, std::string* error) {
  int64_t size = 0;
  const int fd = open_regular(path, &size, error);
  if (fd < 0) return false;
  int32_t h[kShardHeaderInts];
  const bool got = size >= kShardHeaderBytes && read_exact(fd, h, sizeof h, 0);
  ::close(fd);
  if (!got)
    return fail(error, path, "truncated header: " + std::to_string(size) + " bytes, a masked-row shard needs at least " +
                                 std::to_string(kShardHeaderBytes));
  if (h[0] != kMaskedRowMagic)
    return fail(error, path, "bad magic " + std::to_string(h[0]) + " (a masked-row shard has " +
                                 std::to_string(kMaskedRowMagic) + "; token shards 20240520 or 20240801)");
  if (h[1] != kMaskedRowVersion)
    return fail(error, path, "unsupported version " + std::to_string(h[1]) + " (masked-row shards are version " +
                                 std::to_string(kMaskedRowVersion) + ")");
  if (h[2] < 2) return fail(error, path, "row length " + std::to_string(h[2]) + " (at least 2 tokens)");
  if (h[3] != 2 && h[3] != 4) return fail(error, path, "token width " + std::to_string(h[3]) + " bytes (2 or 4)");
  if (h[4] < 0) return fail(error, path, "BOS id " + std::to_string(h[4]));
  int64_t rows = 0;
  std::memcpy(&rows, &h[6], sizeof rows);
  MaskedRowShard s;
  s.path = path;
  s.row_tokens = h[2];
  s.token_bytes = h[3];
  s.bos = h[4];
  if (rows < 0 || rows > (INT64_MAX - kShardHeaderBytes) / s.row_bytes())
    return fail(error, path, "row count " + std::to_string(rows) + " out of range");
  s.rows = rows;
  const int64_t expected = kShardHeaderBytes + rows * s.row_bytes();
  if (size != expected)
    return fail(error, path, std::string(size < expected ? "truncated" : "too long") + ": file is " +
                                 std::to_string(size) + " bytes, header says " + std::to_string(rows) + " rows of " +
                                 std::to_string(s.row_tokens) + " tokens = " + std::to_string(expected) + " bytes");
  *out = s;
  return true;
}

bool read_masked_row_headers(const std::vector<std::string>& paths, std::vector<MaskedRowShard>* out,
                             std::string* error) {
  std::vector<MaskedRowShard> files;
  for (const std::string& path : paths) {
    MaskedRowShard s;
    if (!read_masked_row_header(path, &s, error)) return false;
    if (!files.empty()) {
      const MaskedRowShard& first = files[0];
      if (s.row_tokens != first.row_tokens || s.token_bytes != first.token_bytes || s.bos != first.bos)
        return fail(error, path, "rows of " + std::to_string(s.row_tokens) + " tokens, " +
                                     std::to_string(s.token_bytes) + " bytes each, BOS " + std::to_string(s.bos) +
                                     ", but " + first.path + " holds rows of " + std::to_string(first.row_tokens) +
                                     ", " + std::to_string(first.token_bytes) + ", BOS " + std::to_string(first.bos));
    }
    files.push_back(s);
  }
  *out = std::move(files);
  return true;
}

bool find_masked_row_shards(const std::string& dir_or_file, const std::string& split,
                            std::vector<MaskedRowShard>* out, std::string* error) {
  std::vector<std::string> paths;
  return list_shard_files(dir_or_file, split, &paths, error) && read_masked_row_headers(paths, out, error);
}

MaskedRowSampler::~MaskedRowSampler() {
  if (fd_ >= 0) ::close(fd_);
}

bool MaskedRowSampler::open(std::vector<MaskedRowShard> shards, int B, int T, uint64_t seed, bool pad_epoch_end,
                            std::string* error) {
  if (B <= 0 || T <= 0)
    return fail(error, "batch", "B and T must be positive (got B=" + std::to_string(B) + ", T=" + std::to_string(T) + ")");
  if (shards.empty()) return fail(error, "batch", "no masked-row shards to read");
  total_rows_ = 0;
  as_token_shards_.clear();
  for (const MaskedRowShard& s : shards) {
    if (s.row_tokens != T + 1)
      return fail(error, s.path, "rows of " + std::to_string(s.row_tokens) + " tokens, but this run's rows are " +
                                     "--train-seq-len + 1 = " + std::to_string(T + 1));
    total_rows_ += s.rows;
    as_token_shards_.push_back(TokenShard{s.path, s.rows * s.row_tokens, s.token_bytes});
  }
  if (total_rows_ == 0) return fail(error, shards[0].path, "holds no rows");
  files_ = std::move(shards);
  B_ = B;
  T_ = T;
  seed_ = seed;
  pad_epoch_end_ = pad_epoch_end;
  batches_per_epoch_ = pad_epoch_end ? (total_rows_ + B - 1) / B : std::max<int64_t>(1, total_rows_ / B);
  raw_.assign(static_cast<size_t>(files_[0].row_bytes()), 0);
  order_ = shard_order(static_cast<int64_t>(files_.size()), seed_, 0);
  pos_ = Position{};
  skip_empty();
  return true;
}

void MaskedRowSampler::skip_empty() {
  // Terminates: open() found rows.
  while (true) {
    if (pos_.shard >= static_cast<int64_t>(order_.size())) {
      ++pos_.epoch;
      pos_.shard = 0;
      pos_.offset = 0;
      order_ = shard_order(static_cast<int64_t>(files_.size()), seed_, pos_.epoch);
    }
    if (pos_.offset < files_[order_[pos_.shard]].rows) return;
    ++pos_.shard;
    pos_.offset = 0;
  }
}

bool MaskedRowSampler::read_row(const MaskedRowShard& f, int64_t row, int32_t* inputs, int32_t* targets,
                                std::string* error) {
  if (fd_ < 0 || open_path_ != f.path) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    int64_t size = 0;
    if ((fd_ = open_regular(f.path, &size, error)) < 0) return false;
    open_path_ = f.path;
  }
  const int64_t R = f.row_tokens;
  if (!read_exact(fd_, raw_.data(), raw_.size(), kShardHeaderBytes + row * f.row_bytes()))
    return fail(error, f.path, "truncated: could not read row " + std::to_string(row) +
                                   " (the file changed after it was validated?)");
  const uint8_t* mask = raw_.data() + R * f.token_bytes;
  auto where = [&](int64_t j) { return "row " + std::to_string(row) + ", token " + std::to_string(j); };
  for (int64_t j = 0; j < R; ++j) {
    const int64_t id = token_id(raw_.data(), j, f.token_bytes);
    if ((vocab_size_ > 0 && id >= vocab_size_) || id > INT32_MAX)
      return fail(error, f.path, where(j) + ": token id " + std::to_string(id) + " is out of range for " +
                                     (vocab_size_ > 0 ? "vocab size " + std::to_string(vocab_size_) : "int32"));
    if (j == 0 && id != f.bos)
      return fail(error, f.path, "row " + std::to_string(row) + " starts with " + std::to_string(id) +
                                     ", not the BOS id " + std::to_string(f.bos));
    if (mask[j] > 1)
      return fail(error, f.path, where(j) + ": mask byte " + std::to_string(mask[j]) + " (0 or 1)");
    if (j < R - 1) inputs[j] = static_cast<int32_t>(id);
    if (j > 0) targets[j - 1] = mask[j] ? static_cast<int32_t>(id) : -1;
  }
  return true;
}

bool MaskedRowSampler::next(int32_t* inputs, int32_t* targets, std::string* error) {
  if (files_.empty()) return fail(error, "batch", "sampler is not open");
  const int64_t epoch = pos_.epoch;
  for (int b = 0; b < B_; ++b) {
    int32_t* in = inputs + static_cast<size_t>(b) * T_;
    int32_t* tg = targets + static_cast<size_t>(b) * T_;
    if (pad_epoch_end_ && pos_.epoch != epoch) {  // the epoch ended inside this batch
      std::fill(in, in + T_, static_cast<int32_t>(files_[0].bos));
      std::fill(tg, tg + T_, -1);
      continue;
    }
    if (!read_row(files_[order_[pos_.shard]], pos_.offset, in, tg, error)) return false;
    ++pos_.offset;
    skip_empty();
  }
  return true;
}

bool MaskedRowSampler::seek(const Position& p, std::string* error) {
  if (files_.empty()) return fail(error, "batch", "sampler is not open");
  const int64_t n = static_cast<int64_t>(files_.size());
  if (p.epoch > kMaxEpoch)
    return fail(error, "data position", "epoch " + std::to_string(p.epoch) + " is past the last one the sampler "
                                            "takes (" + std::to_string(kMaxEpoch) + ")");
  if (p.epoch < 0 || p.shard < 0 || p.shard >= n || p.offset < 0)
    return fail(error, "data position", "epoch " + std::to_string(p.epoch) + ", shard " + std::to_string(p.shard) +
                                            ", row " + std::to_string(p.offset) + " is out of range for " +
                                            std::to_string(n) + " masked-row shards");
  const std::vector<int64_t> order = shard_order(n, seed_, p.epoch);
  const MaskedRowShard& f = files_[order[p.shard]];
  if (p.offset > f.rows)
    return fail(error, f.path, "data position row " + std::to_string(p.offset) + " is past the file's " +
                                   std::to_string(f.rows) + " rows");
  order_ = order;
  pos_ = p;
  skip_empty();
  return true;
}

}  // namespace nfn::data
