// The uint64 fields of the checkpoint files' 256-int32 headers: two ints, in the machine's
// byte order (little-endian, as llm.c writes them).
#pragma once

#include <cstdint>
#include <cstring>

namespace nfn {

inline void put_u64(int32_t* header, int index, uint64_t value) { std::memcpy(&header[index], &value, 8); }

inline uint64_t get_u64(const int32_t* header, int index) {
  uint64_t v;
  std::memcpy(&v, &header[index], 8);
  return v;
}

}  // namespace nfn
