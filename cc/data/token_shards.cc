#include "cc/data/token_shards.h"

#include <dirent.h>
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

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  return (!dir.empty() && dir.back() == '/') ? dir + name : dir + "/" + name;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Reads exactly n bytes at offset; a short read means the file shrank or is truncated.
bool read_exact(int fd, void* buf, size_t n, int64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t got = pread(fd, p, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

bool list_dir(const std::string& dir, std::vector<std::string>* names, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (!d) return fail(error, dir, std::string("cannot list directory: ") + std::strerror(errno));
  while (dirent* e = readdir(d)) names->push_back(e->d_name);
  closedir(d);
  std::sort(names->begin(), names->end());
  return true;
}

bool read_all_headers(const std::string& where, const std::vector<std::string>& paths,
                      std::vector<TokenShard>* out, std::string* error) {
  std::vector<TokenShard> shards;
  for (const auto& path : paths) {
    TokenShard s;
    if (!read_shard_header(path, &s, error)) return false;
    shards.push_back(s);
  }
  if (shards.empty()) return fail(error, where, "no token shards found");
  *out = std::move(shards);
  return true;
}

// splitmix64: a tiny, well-mixed generator that any language reproduces in a few lines.
uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

bool check_shards(const std::vector<TokenShard>& shards, std::string* error) {
  if (shards.empty()) return fail(error, "batch", "no shards to sample from");
  for (const auto& s : shards) {
    if (s.token_bytes != 2 && s.token_bytes != 4)  // shards come from read_shard_header, or from Python
      return fail(error, s.path, "token width " + std::to_string(s.token_bytes) + " bytes (2 or 4)");
    if (s.num_tokens < 0) return fail(error, s.path, "negative token count " + std::to_string(s.num_tokens));
    if (s.token_bytes != shards[0].token_bytes)
      return fail(error, s.path, "holds " + std::to_string(8 * s.token_bytes) + "-bit tokens but " + shards[0].path +
                                     " holds " + std::to_string(8 * shards[0].token_bytes) + "-bit tokens");
  }
  return true;
}

bool read_shard_header(const std::string& path, TokenShard* out, std::string* error) {
  // O_NONBLOCK: a FIFO named like a shard is refused below instead of blocking the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(error, path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(error, path, "not a regular file");
  }
  int64_t size = st.st_size;
  int32_t header[kShardHeaderInts];
  bool got = size >= kShardHeaderBytes && read_exact(fd, header, sizeof(header), 0);
  ::close(fd);
  if (!got) {
    return fail(error, path, "truncated header: " + std::to_string(size) + " bytes, a shard needs at least " +
                                 std::to_string(kShardHeaderBytes));
  }
  int token_bytes = 0;
  if (header[0] == kShardMagicU16) {
    token_bytes = 2;
    if (header[1] != kShardVersionU16)
      return fail(error, path, "unsupported version " + std::to_string(header[1]) + " for magic 20240520 (expected 1)");
  } else if (header[0] == kShardMagicU32) {
    token_bytes = 4;
    if (header[1] != kShardVersionU32)
      return fail(error, path, "unsupported version " + std::to_string(header[1]) + " for magic 20240801 (expected 7)");
  } else {
    return fail(error, path, "bad magic " + std::to_string(header[0]) +
                                 " (expected 20240520 for uint16 or 20240801 for uint32 tokens; masked-row shards "
                                 "have 20261215)");
  }
  int64_t ntok = header[2];
  if (ntok < 0) return fail(error, path, "negative token count " + std::to_string(ntok) + " in header");
  int64_t expected = kShardHeaderBytes + ntok * token_bytes;
  if (size != expected) {
    return fail(error, path, std::string(size < expected ? "truncated" : "too long") + ": file is " +
                                 std::to_string(size) + " bytes, header says " + std::to_string(ntok) +
                                 " tokens = " + std::to_string(expected) + " bytes");
  }
  out->path = path;
  out->num_tokens = ntok;
  out->token_bytes = token_bytes;
  return true;
}

bool list_shard_files(const std::string& dir_or_file, const std::string& split, std::vector<std::string>* paths,
                      std::string* error) {
  struct stat st;
  if (stat(dir_or_file.c_str(), &st) != 0)
    return fail(error, dir_or_file, std::string("cannot open: ") + std::strerror(errno));
  paths->clear();
  if (!S_ISDIR(st.st_mode)) {
    paths->push_back(dir_or_file);
    return true;
  }
  std::vector<std::string> names;
  if (!list_dir(dir_or_file, &names, error)) return false;
  const std::string middle = "_" + split + "_", tail = "_" + split + ".bin";
  for (const auto& name : names) {
    if (ends_with(name, ".bin") && (name.find(middle) != std::string::npos || ends_with(name, tail)))
      paths->push_back(join(dir_or_file, name));
  }
  if (paths->empty()) return fail(error, dir_or_file, "no *_" + split + "_*.bin shards found");
  return true;
}

bool find_shards(const std::string& dir_or_file, const std::string& split,
                 std::vector<TokenShard>* out, std::string* error) {
  std::vector<std::string> paths;
  return list_shard_files(dir_or_file, split, &paths, error) && read_all_headers(dir_or_file, paths, out, error);
}

bool validation_sibling_files(const std::string& train_path, std::vector<std::string>* paths, std::string* error) {
  const std::string name = base_name(train_path), dir = dir_name(train_path);
  size_t at = name.rfind("_train");
  if (at == std::string::npos || !ends_with(name, ".bin"))
    return fail(error, train_path, "not a *_train*.bin shard name, so its validation shards cannot be inferred");
  const std::string prefix = name.substr(0, at) + "_val";
  std::vector<std::string> names;
  if (!list_dir(dir, &names, error)) return false;
  paths->clear();
  for (const auto& n : names) {
    if (!starts_with(n, prefix) || !ends_with(n, ".bin")) continue;
    char after = n[prefix.size()];  // "_val_000000.bin" or "_val.bin", not "_valley.bin"
    if (after == '_' || after == '.') paths->push_back(join(dir, n));
  }
  if (paths->empty())
    return fail(error, train_path, "no validation shard beside it (looked for " + prefix + "*.bin in " + dir + ")");
  return true;
}

bool find_validation_siblings(const std::string& train_path, std::vector<TokenShard>* out,
                              std::string* error) {
  std::vector<std::string> paths;
  return validation_sibling_files(train_path, &paths, error) &&
         read_all_headers(dir_name(train_path), paths, out, error);
}

int64_t total_tokens(const std::vector<TokenShard>& shards) {
  int64_t n = 0;
  for (const auto& s : shards) n += s.num_tokens;
  return n;
}

std::vector<int64_t> shard_order(int64_t num_shards, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(num_shards));
  for (int64_t i = 0; i < num_shards; ++i) order[i] = i;
  if (seed == 0) return order;
  uint64_t state = seed ^ (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull);
  for (int64_t i = num_shards - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(splitmix64(&state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

bool check_position(const std::vector<TokenShard>& shards, uint64_t seed, const BatchSampler::Position& p,
                    std::string* error) {
  const int64_t n = static_cast<int64_t>(shards.size());
  if (p.epoch > kMaxEpoch)
    return fail(error, "data position", "epoch " + std::to_string(p.epoch) + " is past the last one the sampler "
                                            "takes (" + std::to_string(kMaxEpoch) + ")");
  if (p.epoch < 0 || p.shard < 0 || p.shard >= n || p.offset < 0) {
    return fail(error, "data position", "epoch " + std::to_string(p.epoch) + ", shard " + std::to_string(p.shard) +
                                            ", offset " + std::to_string(p.offset) + " is out of range for " +
                                            std::to_string(n) + " shards");
  }
  const TokenShard& s = shards[shard_order(n, seed, p.epoch)[p.shard]];
  if (p.offset > s.num_tokens) {
    return fail(error, s.path, "data position offset " + std::to_string(p.offset) + " is past the shard's " +
                                   std::to_string(s.num_tokens) + " tokens");
  }
  return true;
}

ShardFile::~ShardFile() { close(); }

void ShardFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  path_.clear();
}

bool ShardFile::read(const TokenShard& shard, int64_t offset, int64_t count, void* dst, std::string* error) {
  if (fd_ < 0 || path_ != shard.path) {
    close();
    fd_ = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // never blocks on a FIFO
    if (fd_ < 0) return fail(error, shard.path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st;
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      return fail(error, shard.path, "not a regular file");
    }
    path_ = shard.path;
  }
  if (!read_exact(fd_, dst, static_cast<size_t>(count) * shard.token_bytes,
                  kShardHeaderBytes + offset * shard.token_bytes))
    return fail(error, shard.path, "truncated: could not read tokens " + std::to_string(offset) + ".." +
                                       std::to_string(offset + count) + " (the file changed after it was validated?)");
  return true;
}

bool widen_ids(const TokenShard& shard, const uint8_t* raw, int64_t first, int64_t count, int64_t vocab_size,
               int32_t* out, std::string* error) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = token_id(raw, i, shard.token_bytes);
    if ((vocab_size > 0 && id >= vocab_size) || id > INT32_MAX)  // ids are int32 from here on
      return fail(error, shard.path, "token id " + std::to_string(id) + " at token " + std::to_string(first + i) +
                                         " is out of range for " +
                                         (vocab_size > 0 ? "vocab size " + std::to_string(vocab_size) : "int32"));
    out[i] = static_cast<int32_t>(id);
  }
  return true;
}

bool TokenBatchSampler::open(std::vector<TokenShard> shards, int B, int T, uint64_t seed,
                             std::string* error) {
  if (B <= 0 || T <= 0)
    return fail(error, "batch", "B and T must be positive (got B=" + std::to_string(B) + ", T=" + std::to_string(T) + ")");
  if (!check_shards(shards, error)) return false;
  file_.close();
  shards_ = std::move(shards);
  B_ = B;
  T_ = T;
  seed_ = seed;
  const int64_t bt = static_cast<int64_t>(B) * T;
  batches_per_epoch_ = 0;
  int64_t longest = 0;
  for (const auto& s : shards_) {
    if (s.num_tokens >= bt + 1) batches_per_epoch_ += (s.num_tokens - 1) / bt;
    longest = std::max(longest, s.num_tokens);
  }
  if (batches_per_epoch_ == 0) {
    return fail(error, shards_[0].path, "no shard holds B*T+1 = " + std::to_string(bt + 1) +
                                            " tokens (the longest has " + std::to_string(longest) + ")");
  }
  order_ = shard_order(static_cast<int64_t>(shards_.size()), seed_, 0);
  pos_ = Position{};
  skip_to_valid_window();
  window_.assign(static_cast<size_t>(window_tokens()) * token_bytes(), 0);
  ids_.assign(static_cast<size_t>(window_tokens()), 0);
  return true;
}

bool TokenBatchSampler::fits(int64_t shard_index_in_order, int64_t offset) const {
  return offset + window_tokens() <= shards_[order_[shard_index_in_order]].num_tokens;
}

void TokenBatchSampler::skip_to_valid_window() {
  // Terminates: open() checked that at least one shard holds a window.
  while (true) {
    if (pos_.shard >= static_cast<int64_t>(order_.size())) {
      ++pos_.epoch;
      pos_.shard = 0;
      pos_.offset = 0;
      order_ = shard_order(static_cast<int64_t>(shards_.size()), seed_, pos_.epoch);
    }
    if (fits(pos_.shard, pos_.offset)) return;
    ++pos_.shard;
    pos_.offset = 0;
  }
}

bool TokenBatchSampler::next(int32_t* inputs, int32_t* targets, std::string* error) {
  if (shards_.empty()) return fail(error, "batch", "sampler is not open");
  const TokenShard& s = shards_[order_[pos_.shard]];
  const int64_t n = window_tokens();
  if (!file_.read(s, pos_.offset, n, window_.data(), error) ||
      !widen_ids(s, window_.data(), pos_.offset, n, vocab_size_, ids_.data(), error))
    return false;
  std::copy(ids_.begin(), ids_.end() - 1, inputs);
  std::copy(ids_.begin() + 1, ids_.end(), targets);
  pos_.offset += n - 1;
  skip_to_valid_window();
  return true;
}

bool TokenBatchSampler::seek(const Position& p, std::string* error) {
  if (shards_.empty()) return fail(error, "batch", "sampler is not open");
  if (!check_position(shards_, seed_, p, error)) return false;
  order_ = shard_order(static_cast<int64_t>(shards_.size()), seed_, p.epoch);
  pos_ = p;
  skip_to_valid_window();
  return true;
}

}  // namespace nfn::data
