// One op-library allocation carved into 256-byte-aligned slots: models list what they need
// (pointer, bytes) and get a single block to free, instead of one allocation per buffer.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

struct ArenaSlot {
  void** ptr;    // receives the slot's address
  size_t bytes;  // 0 leaves *ptr null
};

inline size_t arena_align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The block alloc_arena asks for `slots`.
inline size_t arena_bytes(const std::vector<ArenaSlot>& slots) {
  size_t total = 0;
  for (const ArenaSlot& s : slots) total += arena_align(s.bytes);
  return total;
}

// Allocates one block for every slot and points each slot into it. false with
// "<what> (<size> GiB): <backend message>" in *error when the allocation fails.
inline bool alloc_arena(const nfn_op_table& ops, nfn_ctx* ctx, const std::vector<ArenaSlot>& slots,
                        const std::string& what, void** block, std::string* error) {
  const size_t total = arena_bytes(slots);
  if (ops.alloc(ctx, total, block) != NFN_OK) {
    char gib[32];
    std::snprintf(gib, sizeof gib, " (%.1f GiB): ", static_cast<double>(total) / (1ull << 30));
    *error = what + gib + ops.ctx_last_error(ctx);
    return false;
  }
  char* p = static_cast<char*>(*block);
  for (const ArenaSlot& s : slots) {
    *s.ptr = s.bytes ? p : nullptr;
    p += arena_align(s.bytes);
  }
  return true;
}

}  // namespace nfn
