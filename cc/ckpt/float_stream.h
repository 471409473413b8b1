// Tensors moved between where they live (the trainer's device memory) and a checkpoint file a
// range at a time, through one chunk-sized host buffer instead of a host copy of each tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cc/util/files.h"

namespace nfn {

// A tensor written from where it lives: fills dst with its f32 elements [offset, offset + count).
using FloatSource = std::function<bool(size_t offset, size_t count, float* dst, std::string* error)>;
// A host vector as a FloatSource.
FloatSource from_host(const std::vector<float>& v);

// Where a read puts a tensor, a range at a time: f32 elements [offset, offset + count).
using FloatSink = std::function<bool(size_t offset, size_t count, const float* src, std::string* error)>;
// A host vector, already sized, as a FloatSink.
FloatSink into_host(std::vector<float>* v);

// How a file stores its floats; reads widen each kind to f32 exactly.
enum class StoredFloat { kF32, kBF16, kF16 };
size_t stored_float_bytes(StoredFloat type);

// Appends the source's elements [first, first + n) to `file`, as f32 or (bf16) rounded to
// nearest even.
bool write_floats(AtomicFileWriter* file, const FloatSource& source, size_t first, size_t n, bool bf16,
                  std::string* error);
// Reads n elements stored as `type` from byte `at` of `file` into the sink's [first, first + n).
bool read_floats(FileReader* file, size_t at, size_t n, StoredFloat type, const FloatSink& sink, size_t first,
                 std::string* error);

}  // namespace nfn
