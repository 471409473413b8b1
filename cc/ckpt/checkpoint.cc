#include "cc/ckpt/checkpoint.h"

#include <cstdio>
#include <cstring>

#include "cc/util/bf16.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

void put_u64(int32_t* header, int index, uint64_t value) { std::memcpy(&header[index], &value, 8); }
uint64_t get_u64(const int32_t* header, int index) {
  uint64_t v;
  std::memcpy(&v, &header[index], 8);
  return v;
}

std::string numbered(const char* fmt, int a, int b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

}  // namespace

std::string model_file_name(int step) { return numbered("model_%08d.bin", step); }
std::string state_file_name(int step, int rank) { return numbered("state_%08d_%05d.bin", step, rank); }
std::string done_file_name(int step) { return numbered("DONE_%08d", step); }

bool write_model_file(const std::string& path, const GPTConfig& c, const std::vector<float>& params, int version,
                      std::string* error) {
  if (params.size() != num_parameters(c)) {
    *error = path + ": parameter count does not match the geometry";
    return false;
  }
  if (version != kModelVersionF32 && version != kModelVersionBF16) {
    *error = path + ": unknown model file version " + std::to_string(version);
    return false;
  }
  int32_t header[256] = {0};
  header[0] = kModelMagic;
  header[1] = version;
  header[2] = c.max_seq_len;
  header[3] = c.vocab_size;
  header[4] = c.num_layers;
  header[5] = c.num_heads;
  header[6] = c.channels;
  header[7] = c.padded_vocab_size;
  if (version == kModelVersionF32)
    return write_file_atomic(path, {{header, sizeof header}, {params.data(), params.size() * 4}}, error);
  std::vector<uint16_t> rounded(params.size());
  for (size_t i = 0; i < params.size(); ++i) rounded[i] = f32_to_bf16(params[i]);
  return write_file_atomic(path, {{header, sizeof header}, {rounded.data(), rounded.size() * 2}}, error);
}

namespace {

// Opens a checkpoint file and reads its 1024-byte header.
bool open_with_header(const std::string& path, FileReader* file, int32_t* header, std::string* error) {
  if (!file->open(path, error)) return false;
  if (file->size() < 1024) {
    *error = path + ": truncated: " + std::to_string(file->size()) + " bytes, the header alone is 1024";
    return false;
  }
  return file->read(0, header, 1024, error);
}

bool parse_model_header(const std::string& path, const int32_t* header, size_t file_size, GPTConfig* c,
                        int* version, std::string* error) {
  if (header[0] != kModelMagic) {
    *error = path + ": bad magic " + std::to_string(header[0]) + " (a model checkpoint has " +
             std::to_string(kModelMagic) + ")";
    return false;
  }
  if (header[1] != kModelVersionF32 && header[1] != kModelVersionBF16) {
    *error = path + ": unsupported version " + std::to_string(header[1]) + " (3 = fp32 and 5 = bf16 are supported)";
    return false;
  }
  *version = header[1];
  c->max_seq_len = header[2];
  c->vocab_size = header[3];
  c->num_layers = header[4];
  c->num_heads = header[5];
  c->channels = header[6];
  c->padded_vocab_size = header[7];
  std::string bad = validate_config(*c);
  if (!bad.empty()) {
    *error = path + ": header geometry: " + bad;
    return false;
  }
  const size_t want = 1024 + num_parameters(*c) * (*version == kModelVersionF32 ? 4 : 2);
  if (file_size != want) {
    *error = path + ": size " + std::to_string(file_size) + " bytes, the header implies " + std::to_string(want);
    return false;
  }
  return true;
}

}  // namespace

bool read_model_header(const std::string& path, GPTConfig* config, int* version, std::string* error) {
  FileReader file;
  int32_t header[256];
  return open_with_header(path, &file, header, error) &&
         parse_model_header(path, header, file.size(), config, version, error);
}

bool read_model_file(const std::string& path, GPTConfig* config, std::vector<float>* params, std::string* error) {
  FileReader file;
  int32_t header[256];
  int version = 0;
  if (!open_with_header(path, &file, header, error) ||
      !parse_model_header(path, header, file.size(), config, &version, error))
    return false;
  const size_t n = num_parameters(*config);
  params->resize(n);
  if (version == kModelVersionF32) return file.read(1024, params->data(), n * 4, error);
  std::vector<uint16_t> stored(n);
  if (!file.read(1024, stored.data(), n * 2, error)) return false;
  for (size_t i = 0; i < n; ++i) (*params)[i] = bf16_to_f32(stored[i]);
  return true;
}

// State header fields: [0] magic, [1] version, [2] processes, [3] rank, [4] master weights
// stored (0: the model file holds f32), [10] step, [20..21] RNG, [30..31] data shard,
// [32..33] data offset, [34..35] data epoch, [40..41] parameter count. Then m and v (f32).
bool write_state_file(const std::string& path, const TrainState& s, std::string* error) {
  if (s.m.size() != s.num_parameters || s.v.size() != s.num_parameters) {
    *error = path + ": optimizer moments do not match the parameter count";
    return false;
  }
  int32_t header[256] = {0};
  header[0] = kStateMagic;
  header[1] = kStateVersion;
  header[2] = 1;
  header[3] = 0;
  header[4] = 0;
  header[10] = s.step;
  put_u64(header, 20, s.rng_state);
  put_u64(header, 30, static_cast<uint64_t>(s.data_shard));
  put_u64(header, 32, static_cast<uint64_t>(s.data_offset));
  put_u64(header, 34, static_cast<uint64_t>(s.data_epoch));
  put_u64(header, 40, s.num_parameters);
  const size_t bytes = 4 * s.num_parameters;
  return write_file_atomic(path, {{header, sizeof header}, {s.m.data(), bytes}, {s.v.data(), bytes}}, error);
}

bool read_state_file(const std::string& path, TrainState* s, std::string* error) {
  FileReader file;
  int32_t header[256];
  if (!open_with_header(path, &file, header, error)) return false;
  if (header[0] != kStateMagic) {
    *error = path + ": bad magic " + std::to_string(header[0]) + " (a state file has " + std::to_string(kStateMagic) + ")";
    return false;
  }
  if (header[1] != kStateVersion) {
    *error = path + ": unsupported state version " + std::to_string(header[1]);
    return false;
  }
  s->step = header[10];
  s->rng_state = get_u64(header, 20);
  s->data_shard = static_cast<int64_t>(get_u64(header, 30));
  s->data_offset = static_cast<int64_t>(get_u64(header, 32));
  s->data_epoch = static_cast<int64_t>(get_u64(header, 34));
  s->num_parameters = get_u64(header, 40);
  const size_t want = 1024 + 8 * s->num_parameters;
  if (file.size() != want) {
    *error = path + ": size " + std::to_string(file.size()) + " bytes, the header implies " + std::to_string(want);
    return false;
  }
  s->m.resize(s->num_parameters);
  s->v.resize(s->num_parameters);
  return file.read(1024, s->m.data(), 4 * s->num_parameters, error) &&
         file.read(1024 + 4 * s->num_parameters, s->v.data(), 4 * s->num_parameters, error);
}

int newest_complete_step(const std::string& dir) {
  int best = -1;
  for (const std::string& name : list_dir(dir)) {
    int step = 0;
    char tail = 0;
    if (name.size() != 13 || std::sscanf(name.c_str(), "DONE_%8d%c", &step, &tail) != 1) continue;
    if (step > best && path_exists(join_path(dir, model_file_name(step))) &&
        path_exists(join_path(dir, state_file_name(step))))
      best = step;
  }
  return best;
}

}  // namespace nfn
