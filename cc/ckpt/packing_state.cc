#include "cc/ckpt/packing_state.h"

#include <cstdio>
#include <cstring>

#include "cc/ckpt/header_words.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

bool reject(const std::string& path, const std::string& what, std::string* error) {
  *error = path + ": " + what;
  return false;
}

// The header's fields that must hold what this reader knows.
bool check_header(const std::string& path, const int32_t* h, std::string* error) {
  if (h[0] != kPackingMagic)
    return reject(path, "bad magic " + std::to_string(h[0]) + " (a packing state file has " +
                            std::to_string(kPackingMagic) + ")", error);
  if (h[1] != kPackingVersion) return reject(path, "unsupported packing state version " + std::to_string(h[1]), error);
  if (h[2] != 1 || h[3] != 0)
    return reject(path, "processes " + std::to_string(h[2]) + ", rank " + std::to_string(h[3]) +
                            " (one process, rank 0, is what the trainer runs)", error);
  if (h[4] != kPackingBestFit)
    return reject(path, "packing " + std::to_string(h[4]) + " (1, BOS-aligned best fit, is the one known)", error);
  return true;
}

}  // namespace

std::string packing_file_name(int step, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "packing_%08d_%05d.bin", step, rank);
  return buf;
}

bool write_packing_file(const std::string& path, const PackingState& s, std::string* error) {
  int32_t header[256] = {0};
  header[0] = kPackingMagic;
  header[1] = kPackingVersion;
  header[2] = 1;
  header[3] = 0;
  header[4] = kPackingBestFit;
  header[5] = static_cast<int32_t>(s.bos);
  header[6] = s.row_tokens;
  header[10] = s.step;
  put_u64(header, 20, static_cast<uint64_t>(s.buffer_size));
  put_u64(header, 22, s.buffered.size());
  std::vector<int64_t> records;
  records.reserve(3 * s.buffered.size());
  for (const data::DocumentSpan& d : s.buffered) records.insert(records.end(), {d.shard, d.offset, d.length});
  return write_file_atomic(path, {{header, sizeof header}, {records.data(), records.size() * 8}}, error);
}

bool read_packing_file(const std::string& path, PackingState* s, std::string* error) {
  FileReader file;
  int32_t header[256];
  if (!file.open(path, error)) return false;
  if (file.size() < sizeof header)
    return reject(path, "truncated: " + std::to_string(file.size()) + " bytes, the header alone is 1024", error);
  if (!file.read(0, header, sizeof header, error) || !check_header(path, header, error)) return false;
  s->bos = header[5];
  s->row_tokens = header[6];
  s->step = header[10];
  s->buffer_size = static_cast<int64_t>(get_u64(header, 20));
  const uint64_t n = get_u64(header, 22);
  if (n > (file.size() - sizeof header) / 24 || file.size() != sizeof header + 24 * n)
    return reject(path, "size " + std::to_string(file.size()) + " bytes, but the header's " + std::to_string(n) +
                            " buffered documents take 24 bytes each after its 1024", error);
  std::vector<int64_t> records(3 * n);
  if (n > 0 && !file.read(sizeof header, records.data(), records.size() * 8, error)) return false;
  s->buffered.resize(n);
  for (uint64_t i = 0; i < n; ++i) s->buffered[i] = {records[3 * i], records[3 * i + 1], records[3 * i + 2]};
  return true;
}

}  // namespace nfn
