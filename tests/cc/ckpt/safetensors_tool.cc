// cc/ckpt/safetensors.h from the command line, for the Python tests that hold it against the
// `safetensors` package:
//   safetensors_tool write OUT PARAMS f32|bf16 [meta KEY VALUE | tensor NAME OFFSET SHAPE]...
//     PARAMS: the flat f32 parameter block (raw little-endian floats)
//   safetensors_tool read FILE OUT ELEMENTS [tensor NAME OFFSET SHAPE]...
//     OUT: an ELEMENTS-long f32 block, zero but for the tensors read into it at their offsets
//   safetensors_tool header FILE      the table read_safetensors_header gives, as JSON
// SHAPE is dims joined by commas ("" for a scalar). An error is its one line on stderr, exit 1.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cc/ckpt/safetensors.h"
#include "cc/util/files.h"
#include "cc/util/json.h"

using namespace nfn;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: safetensors_tool write OUT PARAMS f32|bf16 [meta KEY VALUE | tensor NAME OFFSET SHAPE]...\n"
               "       safetensors_tool read FILE OUT ELEMENTS [tensor NAME OFFSET SHAPE]...\n"
               "       safetensors_tool header FILE\n");
  return 2;
}

int failed(const std::string& error) {
  std::fprintf(stderr, "%s\n", error.c_str());
  return 1;
}

std::vector<size_t> parse_shape(const std::string& text) {
  std::vector<size_t> shape;
  for (size_t at = 0; at < text.size();) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    shape.push_back(std::stoull(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return shape;
}

// The "tensor NAME OFFSET SHAPE" and "meta KEY VALUE" groups from argv[first].
bool parse_groups(int argc, char** argv, int first, std::vector<SafetensorsTensor>* tensors,
                  std::vector<std::pair<std::string, std::string>>* metadata) {
  for (int i = first; i < argc;) {
    const std::string kind = argv[i];
    if (kind == "meta" && metadata != nullptr && i + 2 < argc) {
      metadata->emplace_back(argv[i + 1], argv[i + 2]);
      i += 3;
    } else if (kind == "tensor" && i + 3 < argc) {
      tensors->push_back({argv[i + 1], parse_shape(argv[i + 3]), std::stoull(argv[i + 2])});
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

int write(int argc, char** argv) {
  std::vector<SafetensorsTensor> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;
  const std::string dtype = argv[4];
  if ((dtype != "f32" && dtype != "bf16") || !parse_groups(argc, argv, 5, &tensors, &metadata)) return usage();
  std::string raw, error;
  if (!read_file(argv[3], &raw, &error)) return failed(error);
  std::vector<float> params(raw.size() / 4);
  raw.copy(reinterpret_cast<char*>(params.data()), params.size() * 4);
  return write_safetensors(argv[2], tensors, metadata, from_host(params), dtype == "bf16", &error) ? 0
                                                                                                    : failed(error);
}

int read(int argc, char** argv) {
  std::vector<SafetensorsTensor> tensors;
  if (!parse_groups(argc, argv, 5, &tensors, nullptr)) return usage();
  std::vector<float> block(std::stoull(argv[4]), 0.f);
  SafetensorsInfo info;
  std::string error;
  if (!read_safetensors_header(argv[2], &info, &error)) return failed(error);
  for (const SafetensorsTensor& t : tensors)
    if (!read_safetensors_tensor(argv[2], info, t.name, t.shape, t.offset, into_host(&block), &error))
      return failed(error);
  return write_file_atomic(argv[3], {{block.data(), block.size() * 4}}, &error) ? 0 : failed(error);
}

int header(const char* path) {
  SafetensorsInfo info;
  std::string error;
  if (!read_safetensors_header(path, &info, &error)) return failed(error);
  Json metadata = Json::object(), tensors = Json::object();
  for (const auto& [key, value] : info.metadata) metadata.set(key, value);
  for (const auto& [name, entry] : info.tensors) {
    Json shape = Json::array(), offsets = Json::array();
    for (size_t d : entry.shape) shape.push(Json(static_cast<uint64_t>(d)));
    offsets.push(Json(static_cast<uint64_t>(entry.begin)));
    offsets.push(Json(static_cast<uint64_t>(entry.end)));
    Json json = Json::object();
    json.set("dtype", entry.dtype);
    json.set("shape", std::move(shape));
    json.set("data_offsets", std::move(offsets));
    tensors.set(name, std::move(json));
  }
  Json out = Json::object();
  out.set("data_start", Json(static_cast<uint64_t>(info.data_start)));
  out.set("metadata", std::move(metadata));
  out.set("tensors", std::move(tensors));
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "write" && argc >= 5) return write(argc, argv);
    if (command == "read" && argc >= 5) return read(argc, argv);
    if (command == "header" && argc == 3) return header(argv[2]);
  } catch (const std::exception&) {  // a number that is none (std::stoull)
  }
  return usage();
}
