#include "cc/ckpt/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "cc/util/files.h"
#include "cc/util/json.h"

namespace nfn {

namespace {

// The safetensors package's own limit on the header.
constexpr uint64_t kMaxHeader = 100'000'000;

std::string shape_text(const std::vector<size_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The product of the dims; false where it overflows size_t.
bool element_count(const std::vector<size_t>& shape, size_t* n) {
  size_t total = 1;
  for (size_t d : shape) {
    if (d != 0 && total > SIZE_MAX / d) return false;
    total *= d;
  }
  *n = total;
  return true;
}

bool stored_float(const std::string& dtype, StoredFloat* type) {
  if (dtype == "F32") *type = StoredFloat::kF32;
  else if (dtype == "BF16") *type = StoredFloat::kBF16;
  else if (dtype == "F16") *type = StoredFloat::kF16;
  else return false;
  return true;
}

bool fail(const std::string& path, const std::string& what, std::string* error) {
  *error = path + ": " + what;
  return false;
}

// A callback's own error, led by the file and the tensor it was moving.
void name_callback_error(const std::string& path, const std::string& tensor, std::string* error) {
  *error = path + ": tensor " + tensor + ": " + *error;
}

}  // namespace

bool write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const FloatSource& params,
                       bool bf16, std::string* error) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json strings = Json::object();
    for (const auto& [key, value] : metadata) {
      if (strings.find(key) != nullptr) return fail(path, "metadata key " + key + " appears twice", error);
      strings.set(key, value);
    }
    header.set("__metadata__", std::move(strings));
  }
  const size_t width = bf16 ? 2 : 4;
  std::set<std::string> names;
  std::vector<size_t> counts;
  size_t end = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == "__metadata__") return fail(path, "a tensor cannot be named __metadata__", error);
    if (!names.insert(t.name).second) return fail(path, "tensor " + t.name + " appears twice", error);
    size_t n = 0;
    if (!element_count(t.shape, &n) || n > (SIZE_MAX - end) / width)
      return fail(path, "tensor " + t.name + ": shape " + shape_text(t.shape) + " is too large", error);
    Json shape = Json::array(), offsets = Json::array();
    for (size_t d : t.shape) shape.push(Json(static_cast<uint64_t>(d)));
    offsets.push(Json(static_cast<uint64_t>(end)));
    end += n * width;
    offsets.push(Json(static_cast<uint64_t>(end)));
    Json entry = Json::object();
    entry.set("dtype", bf16 ? "BF16" : "F32");
    entry.set("shape", std::move(shape));
    entry.set("data_offsets", std::move(offsets));
    header.set(t.name, std::move(entry));
    counts.push_back(n);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the package writes
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicFileWriter file;
  if (!file.open(path, error) || !file.write(length, sizeof length, error) ||
      !file.write(text.data(), text.size(), error))
    return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].name;
    const FloatSource named = [&](size_t offset, size_t count, float* dst, std::string* e) {
      if (params(offset, count, dst, e)) return true;
      name_callback_error(path, name, e);
      return false;
    };
    if (!write_floats(&file, named, tensors[i].offset, counts[i], bf16, error)) return false;
  }
  return file.commit(error);
}

namespace {

// A JSON array of non-negative integers as sizes.
bool sizes(const Json& v, std::vector<size_t>* out) {
  if (!v.is_array()) return false;
  out->clear();
  for (const Json& item : v.items()) {
    if (!item.is_integer() || item.as_integer() < 0) return false;
    out->push_back(static_cast<size_t>(item.as_integer()));
  }
  return true;
}

// One tensor's entry, checked against itself and the data's size; false + what is wrong.
bool parse_entry(const Json& v, size_t data_size, SafetensorsInfo::Entry* entry, std::string* why) {
  const Json* dtype = v.is_object() ? v.find("dtype") : nullptr;
  const Json* shape = v.is_object() ? v.find("shape") : nullptr;
  const Json* offsets = v.is_object() ? v.find("data_offsets") : nullptr;
  StoredFloat type;
  if (dtype == nullptr || !dtype->is_string()) return *why = "no dtype string", false;
  if (!stored_float(dtype->as_string(), &type))
    return *why = "dtype " + dtype->as_string() + " is not supported (F32, BF16 and F16 are)", false;
  entry->dtype = dtype->as_string();
  if (shape == nullptr || !sizes(*shape, &entry->shape))
    return *why = "shape is not a list of non-negative integers", false;
  std::vector<size_t> range;
  if (offsets == nullptr || !sizes(*offsets, &range) || range.size() != 2 || range[0] > range[1])
    return *why = "data_offsets is not [begin, end] with begin <= end", false;
  entry->begin = range[0];
  entry->end = range[1];
  const std::string span = "data_offsets " + shape_text(range);
  const size_t width = stored_float_bytes(type);
  size_t n = 0;
  if (!element_count(entry->shape, &n) || n > SIZE_MAX / width)
    return *why = "shape " + shape_text(entry->shape) + " is too large", false;
  if (range[1] - range[0] != n * width)
    return *why = span + " hold " + std::to_string(range[1] - range[0]) + " bytes, shape " +
                  shape_text(entry->shape) + " of " + entry->dtype + " needs " + std::to_string(n * width),
           false;
  if (range[1] > data_size)
    return *why = span + " run past the end of the data (" + std::to_string(data_size) + " bytes)", false;
  return true;
}

// The first two tensors that share a byte, if any (empty tensors share none).
bool find_overlap(const SafetensorsInfo& info, std::string* why) {
  std::vector<std::pair<const std::string*, const SafetensorsInfo::Entry*>> order;
  for (const auto& [name, entry] : info.tensors)
    if (entry.end > entry.begin) order.emplace_back(&name, &entry);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& [a, ea] = order[i - 1];
    const auto& [b, eb] = order[i];
    if (ea->end <= eb->begin) continue;
    *why = "tensors " + *a + " " + shape_text({ea->begin, ea->end}) + " and " + *b + " " +
           shape_text({eb->begin, eb->end}) + " overlap";
    return true;
  }
  return false;
}

}  // namespace

bool read_safetensors_header(const std::string& path, SafetensorsInfo* out, std::string* error) {
  FileReader file;
  if (!file.open(path, error)) return false;
  const std::string size = std::to_string(file.size()) + " bytes";
  if (file.size() < 8) return fail(path, "truncated: " + size + ", the header length alone is 8", error);
  uint8_t length[8];
  if (!file.read(0, length, sizeof length, error)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | length[i];
  if (n > kMaxHeader) return fail(path, "header length " + std::to_string(n) + " is over the 100 MB limit", error);
  if (n > file.size() - 8)
    return fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" + size + ")", error);
  std::string text(n, '\0');
  if (!file.read(8, text.data(), n, error)) return false;
  Json header;
  std::string why;
  if (!Json::parse(text, &header, &why)) return fail(path, "header is not valid JSON: " + why, error);
  if (!header.is_object()) return fail(path, "header is not a JSON object", error);
  SafetensorsInfo info;
  info.data_start = 8 + n;
  for (const auto& [name, value] : header.members()) {
    if (name != "__metadata__") {
      if (!parse_entry(value, file.size() - info.data_start, &info.tensors[name], &why))
        return fail(path, "tensor " + name + ": " + why, error);
      continue;
    }
    if (!value.is_object()) return fail(path, "__metadata__ is not an object", error);
    for (const auto& [key, text_value] : value.members()) {
      if (!text_value.is_string()) return fail(path, "__metadata__ " + key + " is not a string", error);
      info.metadata[key] = text_value.as_string();
    }
  }
  if (find_overlap(info, &why)) return fail(path, why, error);
  *out = std::move(info);
  return true;
}

bool read_safetensors_tensor(const std::string& path, const SafetensorsInfo& info, const std::string& name,
                             const std::vector<size_t>& want_shape, size_t dst_offset, const FloatSink& sink,
                             std::string* error) {
  const auto it = info.tensors.find(name);
  if (it == info.tensors.end())
    return fail(path, "tensor " + name + " is missing (want shape " + shape_text(want_shape) + ")", error);
  const SafetensorsInfo::Entry& entry = it->second;
  if (entry.shape != want_shape)
    return fail(path, "tensor " + name + " has shape " + shape_text(entry.shape) + ", want " + shape_text(want_shape),
                error);
  StoredFloat type;
  if (!stored_float(entry.dtype, &type))
    return fail(path, "tensor " + name + ": dtype " + entry.dtype + " is not supported", error);
  const FloatSink named = [&](size_t offset, size_t count, const float* src, std::string* e) {
    if (sink(offset, count, src, e)) return true;
    name_callback_error(path, name, e);
    return false;
  };
  FileReader file;
  return file.open(path, error) && read_floats(&file, info.data_start + entry.begin,
                                               (entry.end - entry.begin) / stored_float_bytes(type), type, named,
                                               dst_offset, error);
}

}  // namespace nfn
