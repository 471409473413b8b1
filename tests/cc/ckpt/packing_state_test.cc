// The best-fit packing state file: bytes written where cc/ckpt/packing_state.h puts each
// field (read back here by offset, not by the reader), a round trip of every field, and each
// field the reader refuses named with the file.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/ckpt/packing_state.h"
#include "cc/util/files.h"
#include "tests/cc/expect.h"

using namespace nfn;

namespace {

int32_t int_at(const std::string& bytes, size_t index) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * index, 4);
  return v;
}

int64_t int64_at(const std::string& bytes, size_t byte_offset) {
  int64_t v;
  std::memcpy(&v, bytes.data() + byte_offset, 8);
  return v;
}

// The file with int32 number `index` of its header set to `value`.
std::string with_int(std::string bytes, size_t index, int32_t value) {
  std::memcpy(&bytes[4 * index], &value, 4);
  return bytes;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  char tmpl[] = "/tmp/nfn_packing_state_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = join_path(dir, packing_file_name(12));
  EXPECT(packing_file_name(12) == "packing_00000012_00000.bin", "%s", packing_file_name(12).c_str());

  PackingState s;
  s.step = 12;
  s.bos = 50256;
  s.row_tokens = 1025;
  s.buffer_size = 1000;
  s.buffered = {{3, 17, 40}, {0, int64_t{1} << 33, 2}, {7, 0, 1}};
  std::string error;
  EXPECT(write_packing_file(path, s, &error), "%s", error.c_str());
  std::string bytes;
  EXPECT(read_file(path, &bytes, &error), "%s", error.c_str());
  EXPECT(bytes.size() == 1024 + 3 * 24, "size %zu", bytes.size());
  const int32_t want[] = {20261208, 1, 1, 0, 1, 50256, 1025};
  for (int i = 0; i < 7; ++i) EXPECT(int_at(bytes, i) == want[i], "header[%d] = %d", i, int_at(bytes, i));
  EXPECT(int_at(bytes, 10) == 12, "step %d", int_at(bytes, 10));
  EXPECT(int64_at(bytes, 80) == 1000 && int64_at(bytes, 88) == 3, "buffer size and count");
  EXPECT(int64_at(bytes, 1024 + 24) == 0 && int64_at(bytes, 1024 + 32) == (int64_t{1} << 33) &&
             int64_at(bytes, 1024 + 40) == 2,
         "second document");

  PackingState back;
  EXPECT(read_packing_file(path, &back, &error), "%s", error.c_str());
  EXPECT(back.step == 12 && back.bos == 50256 && back.row_tokens == 1025 && back.buffer_size == 1000 &&
             back.buffered == s.buffered,
         "round trip");

  const struct {
    std::string bytes;
    const char* says;
  } bad[] = {
      {with_int(bytes, 0, 20240527), ": bad magic 20240527 (a packing state file has 20261208)"},
      {with_int(bytes, 1, 2), ": unsupported packing state version 2"},
      {with_int(bytes, 3, 1), ": processes 1, rank 1"},
      {with_int(bytes, 4, 2), ": packing 2 (1, BOS-aligned best fit, is the one known)"},
      {bytes.substr(0, bytes.size() - 8), ": size 1088 bytes, but the header's 3 buffered documents"},
      {bytes.substr(0, 1000), ": truncated: 1000 bytes"},
  };
  for (const auto& b : bad) {
    EXPECT(write_file_atomic(path, b.bytes, &error), "%s", error.c_str());
    EXPECT(!read_packing_file(path, &back, &error) && contains(error, path + b.says), "got '%s', want '%s'",
           error.c_str(), b.says);
  }
  EXPECT(!read_packing_file(join_path(dir, "none.bin"), &back, &error) && contains(error, "none.bin"), "%s",
         error.c_str());
  std::string ignored;
  remove_file(path, &ignored);
  rmdir(dir.c_str());
  return nfn_test::finish("packing_state_test");
}
