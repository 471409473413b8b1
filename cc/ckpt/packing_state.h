// The sampler state a best-fit run's checkpoint adds to llm.c's state file (whose data
// position is where the stream reads its next document): the documents read ahead into the
// packing buffer and not yet placed, in buffer order. One file a rank,
// packing_%08d_%05d.bin, written after the state file and before the DONE marker; contiguous
// runs write none.
//
// Layout: 256 int32 header, [0] magic 20261208, [1] version 1, [2] processes, [3] rank,
// [4] packing (1: BOS-aligned best fit), [5] BOS id, [6] row tokens (T+1), [10] step,
// [20..21] buffer size in documents (uint64), [22..23] buffered documents n (uint64); then n
// records of three int64: shard (index into the run's training shards sorted by name),
// offset and length in tokens. Little-endian, as the state file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/data/batch_sampler.h"

namespace nfn {

constexpr int kPackingMagic = 20261208;
constexpr int kPackingVersion = 1;
constexpr int kPackingBestFit = 1;

std::string packing_file_name(int step, int rank = 0);

struct PackingState {
  int step = 0;
  int64_t bos = 0;
  int row_tokens = 0;
  int64_t buffer_size = 0;
  std::vector<data::DocumentSpan> buffered;
};

bool write_packing_file(const std::string& path, const PackingState& state, std::string* error);
// Errors name the file and the field ("<path>: bad magic ...", "<path>: size ...").
bool read_packing_file(const std::string& path, PackingState* state, std::string* error);

}  // namespace nfn
