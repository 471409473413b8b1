#include "cc/ckpt/float_stream.h"

#include <algorithm>
#include <cstdint>

#include "cc/util/bf16.h"
#include "cc/util/f16.h"

namespace nfn {

namespace {

// Elements streamed at a time: 16 MB of f32.
constexpr size_t kChunk = size_t{1} << 22;

}  // namespace

FloatSource from_host(const std::vector<float>& v) {
  return [&v](size_t offset, size_t count, float* dst, std::string*) {
    std::copy(v.begin() + offset, v.begin() + offset + count, dst);
    return true;
  };
}

FloatSink into_host(std::vector<float>* v) {
  return [v](size_t offset, size_t count, const float* src, std::string*) {
    std::copy(src, src + count, v->begin() + offset);
    return true;
  };
}

size_t stored_float_bytes(StoredFloat type) { return type == StoredFloat::kF32 ? 4 : 2; }

bool write_floats(AtomicFileWriter* file, const FloatSource& source, size_t first, size_t n, bool bf16,
                  std::string* error) {
  std::vector<float> chunk(std::min(n, kChunk));
  std::vector<uint16_t> rounded(bf16 ? chunk.size() : 0);
  for (size_t done = 0; done < n; done += chunk.size()) {
    const size_t count = std::min(chunk.size(), n - done);
    if (!source(first + done, count, chunk.data(), error)) return false;
    if (!bf16) {
      if (!file->write(chunk.data(), count * 4, error)) return false;
      continue;
    }
    for (size_t i = 0; i < count; ++i) rounded[i] = f32_to_bf16(chunk[i]);
    if (!file->write(rounded.data(), count * 2, error)) return false;
  }
  return true;
}

bool read_floats(FileReader* file, size_t at, size_t n, StoredFloat type, const FloatSink& sink, size_t first,
                 std::string* error) {
  std::vector<float> chunk(std::min(n, kChunk));
  std::vector<uint16_t> stored(type == StoredFloat::kF32 ? 0 : chunk.size());
  const size_t width = stored_float_bytes(type);
  for (size_t done = 0; done < n; done += chunk.size()) {
    const size_t count = std::min(chunk.size(), n - done);
    if (type == StoredFloat::kF32) {
      if (!file->read(at + done * width, chunk.data(), count * width, error)) return false;
    } else {
      if (!file->read(at + done * width, stored.data(), count * width, error)) return false;
      for (size_t i = 0; i < count; ++i)
        chunk[i] = type == StoredFloat::kBF16 ? bf16_to_f32(stored[i]) : f16_to_f32(stored[i]);
    }
    if (!sink(first + done, count, chunk.data(), error)) return false;
  }
  return true;
}

}  // namespace nfn
