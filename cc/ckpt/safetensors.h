// Safetensors files, the format Hugging Face tooling reads as it is: an 8-byte little-endian
// header length n, n bytes of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}}
// plus an optional "__metadata__" of strings, padded with spaces to a multiple of 8), then
// the data, offsets counted from the header's end. Tensors stream a chunk at a time between
// the file and the model's flat f32 parameter block. Errors are "<path>: <what>", one line.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cc/ckpt/float_stream.h"

namespace nfn {

struct SafetensorsTensor {
  std::string name;
  std::vector<size_t> shape;
  size_t offset;  // elements from the start of the model's flat f32 parameter block
};

// Writes the tensors in the given order, F32 or (bf16) BF16 rounded to nearest even, read from
// `params` a chunk at a time, with `metadata` as "__metadata__"; atomically. Names must be
// distinct and not "__metadata__", metadata keys distinct.
bool write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const FloatSource& params,
                       bool bf16, std::string* error);

struct SafetensorsInfo {
  std::map<std::string, std::string> metadata;
  struct Entry {
    std::string dtype;  // F32, BF16 or F16
    std::vector<size_t> shape;
    size_t begin, end;  // bytes, counted from data_start
  };
  std::map<std::string, Entry> tensors;
  size_t data_start;  // 8 + the header length: where the data begins in the file
};

// The header, validated: the length at most 100 MB and within the file, a JSON object,
// metadata of strings, every tensor F32, BF16 or F16 with data_offsets holding exactly its
// shape's bytes, inside the data and overlapping no other tensor.
bool read_safetensors_header(const std::string& path, SafetensorsInfo* out, std::string* error);

// Tensor `name` (from `info`, read_safetensors_header's), widened to f32, into the sink's
// [dst_offset, dst_offset + elements) a chunk at a time; refuses a missing tensor or a shape
// other than want_shape.
bool read_safetensors_tensor(const std::string& path, const SafetensorsInfo& info, const std::string& name,
                             const std::vector<size_t>& want_shape, size_t dst_offset, const FloatSink& sink,
                             std::string* error);

}  // namespace nfn
