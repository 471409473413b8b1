// Safetensors files through cc/ckpt/safetensors.h. Written: the header is length + space-padded
// JSON whose table lists the tensors in order with back-to-back offsets; the source is asked
// each tensor's own range a chunk at a time (one tensor spans two chunks); F32 reads back bit
// for bit and BF16 as rounded to nearest even by a rounding computed here in double. Read:
// F16 files made here widen every one of the 65536 halves to the value computed from its bits
// in double; an unpadded header reads; each bad input is refused with its own one line.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cc/ckpt/safetensors.h"
#include "cc/util/files.h"
#include "cc/util/json.h"
#include "tests/cc/expect.h"

using namespace nfn;

namespace {

// Values of many magnitudes, signs and low mantissa bits.
std::vector<float> spread(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    const double unit = static_cast<double>(seed >> 11) / 9007199254740992.0;  // [0, 1)
    v[i] = static_cast<float>((unit - 0.5) * std::ldexp(1.0, static_cast<int>(seed % 41) - 20));
  }
  return v;
}

// f32 to bf16 by arithmetic: the nearest multiple of bf16's spacing at that magnitude (8
// significant bits; subnormal spacing 2^-133), ties to even by nearbyint; past the largest
// bf16 it becomes infinite.
float bf16_reference(float f) {
  if (!std::isfinite(f) || f == 0.f) return f;
  int exponent = 0;
  std::frexp(static_cast<double>(f), &exponent);  // |f| in [2^(exponent-1), 2^exponent)
  const double spacing = std::ldexp(1.0, std::max(exponent - 8, -133));
  const double nearest = std::nearbyint(static_cast<double>(f) / spacing) * spacing;
  return std::fabs(nearest) > std::numeric_limits<float>::max() ? std::copysign(INFINITY, f)
                                                                 : static_cast<float>(nearest);
}

// An IEEE half from its fields, in double.
double f16_reference(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double magnitude;
  if (exponent == 31) magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (exponent == 0) magnitude = std::ldexp(mantissa, -24);
  else magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

bool same(float a, double b) { return (std::isnan(a) && std::isnan(b)) || static_cast<double>(a) == b; }

// A file made byte by byte: the length, the header text as given, then the data.
bool make_file(const std::string& path, const std::string& header, const std::string& data, std::string* error) {
  uint64_t n = header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  return write_file_atomic(path, bytes + header + data, error);
}

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// A sink into v that records whether it was asked in order from `first`, each range one chunk at most.
struct Collected {
  std::vector<float> v;
  size_t next = 0, calls = 0;
  bool in_order = true;
  FloatSink sink(size_t first) {
    next = first;
    return [this](size_t offset, size_t count, const float* src, std::string*) {
      in_order = in_order && offset == next && count <= (size_t{1} << 22);
      next = offset + count;
      ++calls;
      std::memcpy(v.data() + offset, src, count * 4);
      return true;
    };
  }
};

const SafetensorsInfo::Entry* entry_of(const SafetensorsInfo& info, const std::string& name) {
  auto it = info.tensors.find(name);
  return it == info.tensors.end() ? nullptr : &it->second;
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/nfn_safetensors_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::string error;

  // A parameter block with the tensors out of order in it, one of them over a chunk (4M).
  const size_t big = (size_t{1} << 22) + 1000;
  std::vector<float> params = spread(big + 300, 3);
  const std::vector<SafetensorsTensor> tensors = {
      {"h.0.w", {4, 5}, big + 100}, {"wte", {big / 8, 8}, 0}, {"scale", {}, big + 7}, {"empty", {0, 3}, big + 9},
      {"b", {30}, big + 200}};
  const std::vector<std::pair<std::string, std::string>> metadata = {
      {"family", "gpt"}, {"note", "quote \" backslash \\ tab \t caf\xc3\xa9"}};
  // Where each tensor's elements lie in the block: the only ranges the source may be asked.
  std::vector<std::pair<size_t, size_t>> asked;
  const FloatSource source = [&](size_t offset, size_t count, float* dst, std::string*) {
    asked.emplace_back(offset, count);
    std::memcpy(dst, params.data() + offset, count * 4);
    return true;
  };
  const std::string f32_path = join_path(dir, "f32.safetensors");
  EXPECT(write_safetensors(f32_path, tensors, metadata, source, false, &error), "write f32: %s", error.c_str());
  const std::vector<std::pair<size_t, size_t>> want_asked = {
      {big + 100, 20}, {0, size_t{1} << 22}, {size_t{1} << 22, big - (size_t{1} << 22)}, {big + 7, 1}, {big + 200, 30}};
  EXPECT(asked == want_asked, "the source was asked %zu ranges, not each tensor's own a chunk at a time",
         asked.size());

  // The header as the format lays it out.
  std::string raw;
  EXPECT(read_file(f32_path, &raw, &error), "%s", error.c_str());
  uint64_t n = 0;
  for (int i = 7; i >= 0 && raw.size() >= 8; --i) n = n << 8 | static_cast<uint8_t>(raw[i]);
  EXPECT(n % 8 == 0 && raw.size() >= 8 + n, "header length %llu: want a multiple of 8 within the file",
         static_cast<unsigned long long>(n));
  const std::string text = raw.substr(8, n);
  const size_t json_end = text.find_last_not_of(' ') + 1;
  EXPECT(json_end + 8 > text.size() && text[json_end - 1] == '}', "padding: %zu spaces after the JSON",
         text.size() - json_end);
  Json header;
  EXPECT(Json::parse(text, &header, &error) && header.members().size() == 6, "header JSON: %s", error.c_str());
  size_t at = 0, i = 0;
  for (const auto& [name, entry] : header.members()) {
    if (name == "__metadata__") {
      EXPECT(i == 0 && entry.members().size() == 2 && entry.find("note")->as_string() == metadata[1].second,
             "__metadata__ first with both strings");
      ++i;
      continue;
    }
    const SafetensorsTensor& t = tensors[i++ - 1];
    size_t elements = 1;
    for (size_t d : t.shape) elements *= d;
    const std::vector<Json>& offsets = entry.find("data_offsets")->items();
    EXPECT(name == t.name && entry.find("dtype")->as_string() == "F32" && offsets.size() == 2 &&
               static_cast<size_t>(offsets[0].as_integer()) == at &&
               static_cast<size_t>(offsets[1].as_integer()) == at + 4 * elements &&
               entry.find("shape")->items().size() == t.shape.size(),
           "tensor %s: its entry is not in order, F32, back to back", name.c_str());
    at += 4 * elements;
  }
  EXPECT(raw.size() == 8 + n + at, "file of %zu bytes, the table covers %zu", raw.size(), 8 + n + at);

  // Read back: the table, the metadata, and each tensor bit for bit at its offset in the sink.
  SafetensorsInfo info;
  EXPECT(read_safetensors_header(f32_path, &info, &error), "read header: %s", error.c_str());
  EXPECT(info.data_start == 8 + n && info.tensors.size() == 5 && info.metadata.size() == 2 &&
             info.metadata["family"] == "gpt" && info.metadata["note"] == metadata[1].second,
         "header: data at %zu, %zu tensors, %zu metadata", info.data_start, info.tensors.size(), info.metadata.size());
  const SafetensorsInfo::Entry* wte = entry_of(info, "wte");
  EXPECT(wte && wte->dtype == "F32" && wte->shape == std::vector<size_t>({big / 8, 8}) && wte->begin == 80 &&
             wte->end == 80 + 4 * big,
         "wte's entry");
  Collected back;
  back.v.assign(params.size() + 50, NAN);
  for (const SafetensorsTensor& t : tensors) {
    EXPECT(read_safetensors_tensor(f32_path, info, t.name, t.shape, t.offset + 50, back.sink(t.offset + 50), &error),
           "read %s: %s", t.name.c_str(), error.c_str());
    EXPECT(back.in_order, "%s: the sink was not asked in order a chunk at a time", t.name.c_str());
  }
  size_t wrong = 0;
  for (const SafetensorsTensor& t : tensors) {
    size_t elements = 1;
    for (size_t d : t.shape) elements *= d;
    wrong += std::memcmp(back.v.data() + t.offset + 50, params.data() + t.offset, elements * 4) != 0;
  }
  EXPECT(wrong == 0 && back.calls == 5, "f32: %zu tensors changed, %zu sink calls", wrong, back.calls);

  // BF16: rounded to nearest even, ties both ways, overflow to infinity, subnormals, specials.
  std::vector<float> special = {0.f, -0.f, INFINITY, -INFINITY, NAN, 3.4e38f, -3.39e38f, 1e-40f, -3e-39f, 1e-45f};
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00018000u, 0x7f7fffffu, 0x3f80ffffu}) {
    float f;
    std::memcpy(&f, &bits, 4);
    special.push_back(f);
  }
  std::copy(special.begin(), special.end(), params.begin() + big + 200);
  const std::string bf16_path = join_path(dir, "bf16.safetensors");
  EXPECT(write_safetensors(bf16_path, tensors, {}, from_host(params), true, &error), "write bf16: %s", error.c_str());
  SafetensorsInfo bf16_info;
  EXPECT(read_safetensors_header(bf16_path, &bf16_info, &error) && bf16_info.metadata.empty(), "read bf16 header: %s",
         error.c_str());
  EXPECT(read_file(bf16_path, &raw, &error) && raw.find("__metadata__") == std::string::npos,
         "no metadata given, no __metadata__ written");
  std::vector<float> rounded(params.size(), NAN);
  wrong = 0;
  for (const SafetensorsTensor& t : tensors) {
    const SafetensorsInfo::Entry* e = entry_of(bf16_info, t.name);
    EXPECT(e && e->dtype == "BF16", "%s is not BF16", t.name.c_str());
    EXPECT(read_safetensors_tensor(bf16_path, bf16_info, t.name, t.shape, t.offset, into_host(&rounded), &error),
           "read bf16 %s: %s", t.name.c_str(), error.c_str());
    size_t elements = 1;
    for (size_t d : t.shape) elements *= d;
    for (size_t k = t.offset; k < t.offset + elements; ++k) wrong += !same(rounded[k], bf16_reference(params[k]));
  }
  EXPECT(wrong == 0, "bf16: %zu values not rounded to nearest even", wrong);
  EXPECT(std::isinf(rounded[big + 205]) && rounded[big + 210] == 1.0f && rounded[big + 211] == 1.015625f,
         "3.4e38 overflows, 1 + 2^-8 ties down to 1 and 1.0078125 + 2^-8 up to 1.015625");

  // F16, made here: every half widens to its value; a header that is not padded reads.
  std::vector<uint16_t> halves(65536);
  for (size_t k = 0; k < halves.size(); ++k) halves[k] = static_cast<uint16_t>(k);
  const std::string f16_path = join_path(dir, "f16.safetensors");
  EXPECT(make_file(f16_path, "{\"all\":{\"dtype\":\"F16\",\"shape\":[256,256],\"data_offsets\":[0,131072]}}",
                   bytes_of(halves.data(), 131072), &error),
         "%s", error.c_str());
  SafetensorsInfo f16_info;
  std::vector<float> widened(65536 + 3, 0.f);
  EXPECT(read_safetensors_header(f16_path, &f16_info, &error) &&
             read_safetensors_tensor(f16_path, f16_info, "all", {256, 256}, 3, into_host(&widened), &error),
         "read f16: %s", error.c_str());
  wrong = 0;
  for (size_t k = 0; k < halves.size(); ++k) wrong += !same(widened[k + 3], f16_reference(halves[k]));
  EXPECT(wrong == 0 && widened[3 + 1] == std::ldexp(1.f, -24) && widened[3 + 0x7bff] == 65504.f,
         "f16: %zu of 65536 halves widened wrong", wrong);

  // Refusals, each one line naming the file: the header...
  const std::string bad = join_path(dir, "bad.safetensors");
  const std::string f32x2 = std::string(8, '\0');
  auto header_error = [&](const std::string& table, const std::string& data) {
    std::string why;
    SafetensorsInfo ignored;
    if (!make_file(bad, table, data, &why)) return "make_file: " + why;
    return read_safetensors_header(bad, &ignored, &why) ? std::string("accepted") : why;
  };
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets;
  };
  const struct {
    std::string header, data, want;
  } cases[] = {
      {"{\"a\":{" + entry("F32", "[2]", "[0,8]") + "}}  ", f32x2, "accepted"},
      {"{\"a\":{" + entry("F32", "[2]", "[0,8]") + "}", f32x2,
       "header is not valid JSON: line 1, column 54: expected , or }"},
      {"[1, 2]", "", "header is not a JSON object"},
      {"{\"a\":{" + entry("I64", "[1]", "[0,8]") + "}}", f32x2,
       "tensor a: dtype I64 is not supported (F32, BF16 and F16 are)"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", f32x2, "tensor a: no dtype string"},
      {"{\"a\":{" + entry("F32", "[3]", "[0,8]") + "}}", f32x2,
       "tensor a: data_offsets [0, 8] hold 8 bytes, shape [3] of F32 needs 12"},
      {"{\"a\":{" + entry("BF16", "[2,-1]", "[0,8]") + "}}", f32x2,
       "tensor a: shape is not a list of non-negative integers"},
      {"{\"a\":{" + entry("F32", "[2]", "[8,0]") + "}}", f32x2,
       "tensor a: data_offsets is not [begin, end] with begin <= end"},
      {"{\"a\":{" + entry("F32", "[2]", "[0,8,16]") + "}}", f32x2,
       "tensor a: data_offsets is not [begin, end] with begin <= end"},
      {"{\"a\":{" + entry("F32", "[2]", "[4,12]") + "}}", f32x2,
       "tensor a: data_offsets [4, 12] run past the end of the data (8 bytes)"},
      {"{\"a\":{" + entry("F16", "[2]", "[0,4]") + "},\"b\":{" + entry("F32", "[1]", "[2,6]") + "}}", f32x2,
       "tensors a [0, 4] and b [2, 6] overlap"},
      {"{\"a\":{" + entry("F16", "[2]", "[0,4]") + "},\"e\":{" + entry("F32", "[0]", "[2,2]") + "}}", f32x2,
       "accepted"},
      {"{\"__metadata__\":{\"k\":1}}", "", "__metadata__ k is not a string"},
      {"{\"__metadata__\":[]}", "", "__metadata__ is not an object"},
  };
  for (const auto& c : cases) {
    const std::string got = header_error(c.header, c.data);
    const std::string want = c.want == "accepted" ? c.want : bad + ": " + c.want;
    EXPECT(got == want, "%s:\n  got  %s\n  want %s", c.header.c_str(), got.c_str(), want.c_str());
  }
  SafetensorsInfo ignored;
  EXPECT(write_file_atomic(bad, std::string("\x10\0\0", 3), &error) && !read_safetensors_header(bad, &ignored, &error) &&
             error == bad + ": truncated: 3 bytes, the header length alone is 8",
         "truncated: %s", error.c_str());
  EXPECT(make_file(bad, "{}", "", &error) && read_file(bad, &raw, &error), "%s", error.c_str());
  raw[0] = 3;
  EXPECT(write_file_atomic(bad, raw, &error) && !read_safetensors_header(bad, &ignored, &error) &&
             error == bad + ": header length 3 runs past the end of the file (10 bytes)",
         "header length past the end: %s", error.c_str());
  raw.replace(0, 8, std::string("\x00\x00\x00\x10\x00\x00\x00\x00", 8));
  EXPECT(write_file_atomic(bad, raw, &error) && !read_safetensors_header(bad, &ignored, &error) &&
             error == bad + ": header length 268435456 is over the 100 MB limit",
         "header length over the limit: %s", error.c_str());
  EXPECT(!read_safetensors_header(join_path(dir, "absent"), &ignored, &error) &&
             error.rfind(join_path(dir, "absent") + ": cannot open", 0) == 0,
         "a missing file: %s", error.c_str());

  // ...a tensor asked for that is missing or of another shape...
  EXPECT(!read_safetensors_tensor(f32_path, info, "lm_head", {4, 5}, 0, into_host(&back.v), &error) &&
             error == f32_path + ": tensor lm_head is missing (want shape [4, 5])",
         "missing tensor: %s", error.c_str());
  EXPECT(!read_safetensors_tensor(f32_path, info, "h.0.w", {5, 4}, 0, into_host(&back.v), &error) &&
             error == f32_path + ": tensor h.0.w has shape [4, 5], want [5, 4]",
         "wrong shape: %s", error.c_str());
  const FloatSink refusing = [](size_t, size_t, const float*, std::string* e) { return *e = "device full", false; };
  EXPECT(!read_safetensors_tensor(f32_path, info, "b", {30}, 0, refusing, &error) &&
             error == f32_path + ": tensor b: device full",
         "a failing sink: %s", error.c_str());

  // ...and a write that cannot be made: nothing written, the file already there intact.
  const FloatSource failing = [](size_t offset, size_t, float*, std::string* e) {
    return *e = "copy failed at " + std::to_string(offset), false;
  };
  EXPECT(!write_safetensors(f32_path, tensors, metadata, failing, false, &error) &&
             error == f32_path + ": tensor h.0.w: copy failed at " + std::to_string(big + 100),
         "a failing source: %s", error.c_str());
  EXPECT(read_safetensors_header(f32_path, &info, &error) && info.tensors.size() == 5, "the old file was changed");
  const std::string never = join_path(dir, "never.safetensors");
  EXPECT(!write_safetensors(never, {{"a", {1}, 0}, {"a", {2}, 1}}, {}, source, false, &error) &&
             error == never + ": tensor a appears twice",
         "a repeated name: %s", error.c_str());
  EXPECT(!write_safetensors(never, {{"__metadata__", {1}, 0}}, {}, source, false, &error) &&
             error == never + ": a tensor cannot be named __metadata__",
         "__metadata__ as a name: %s", error.c_str());
  EXPECT(!write_safetensors(never, {}, {{"k", "1"}, {"k", "2"}}, source, false, &error) &&
             error == never + ": metadata key k appears twice",
         "a repeated metadata key: %s", error.c_str());
  EXPECT(!path_exists(never), "a refused write left a file");
  for (const std::string& name : list_dir(dir))
    EXPECT(name.find(".tmp.") == std::string::npos, "a failed write left %s", name.c_str());
  return nfn_test::finish("safetensors_test");
}
