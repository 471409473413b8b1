#include "cc/ckpt/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cc/ckpt/header_words.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

std::string numbered(const char* fmt, int a, int b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

}  // namespace

std::string model_file_name(int step) { return numbered("model_%08d.bin", step); }
std::string state_file_name(int step, int rank) { return numbered("state_%08d_%05d.bin", step, rank); }
std::string done_file_name(int step) { return numbered("DONE_%08d", step); }

bool write_model_file(const std::string& path, const GPTConfig& c, const FloatSource& params, int version,
                      std::string* error) {
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
  AtomicFileWriter file;
  return file.open(path, error) && file.write(header, sizeof header, error) &&
         write_floats(&file, params, 0, num_parameters(c), version == kModelVersionBF16, error) && file.commit(error);
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

bool read_model_file(const std::string& path, GPTConfig* config, const FloatSink& params, std::string* error) {
  FileReader file;
  int32_t header[256];
  int version = 0;
  return open_with_header(path, &file, header, error) &&
         parse_model_header(path, header, file.size(), config, &version, error) &&
         read_floats(&file, 1024, num_parameters(*config),
                     version == kModelVersionBF16 ? StoredFloat::kBF16 : StoredFloat::kF32, params, 0, error);
}

bool read_model_file(const std::string& path, GPTConfig* config, std::vector<float>* params, std::string* error) {
  int version = 0;
  if (!read_model_header(path, config, &version, error)) return false;
  params->resize(num_parameters(*config));
  return read_model_file(path, config, into_host(params), error);
}

// State header fields: [0] magic, [1] version, [2] processes, [3] rank, [4] master weights
// stored (0: the model file holds f32; 1: they follow m and v), [10] step, [20..21] RNG,
// [30..31] data shard, [32..33] data offset, [34..35] data epoch, [40..41] parameter count.
// Then m and v (f32), then the master weights (f32) where [4] is 1.
bool write_state_file(const std::string& path, const TrainState& s, const FloatSource& m, const FloatSource& v,
                      std::string* error, const FloatSource* master) {
  int32_t header[256] = {0};
  header[0] = kStateMagic;
  header[1] = kStateVersion;
  header[2] = 1;
  header[3] = 0;
  header[4] = master != nullptr ? 1 : 0;
  header[10] = s.step;
  put_u64(header, 20, s.rng_state);
  put_u64(header, 30, static_cast<uint64_t>(s.data_shard));
  put_u64(header, 32, static_cast<uint64_t>(s.data_offset));
  put_u64(header, 34, static_cast<uint64_t>(s.data_epoch));
  put_u64(header, 40, s.num_parameters);
  AtomicFileWriter file;
  return file.open(path, error) && file.write(header, sizeof header, error) &&
         write_floats(&file, m, 0, s.num_parameters, false, error) &&
         write_floats(&file, v, 0, s.num_parameters, false, error) &&
         (master == nullptr || write_floats(&file, *master, 0, s.num_parameters, false, error)) && file.commit(error);
}

bool read_state_header(const std::string& path, TrainState* s, std::string* error) {
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
  if (header[4] != 0 && header[4] != 1) {
    *error = path + ": master-weights flag " + std::to_string(header[4]) + " (expected 0 or 1)";
    return false;
  }
  s->has_master = header[4] == 1;
  s->step = header[10];
  s->rng_state = get_u64(header, 20);
  s->data_shard = static_cast<int64_t>(get_u64(header, 30));
  s->data_offset = static_cast<int64_t>(get_u64(header, 32));
  s->data_epoch = static_cast<int64_t>(get_u64(header, 34));
  s->num_parameters = get_u64(header, 40);
  const size_t want = 1024 + (s->has_master ? 12 : 8) * s->num_parameters;
  if (file.size() != want) {
    *error = path + ": size " + std::to_string(file.size()) + " bytes, the header implies " + std::to_string(want);
    return false;
  }
  return true;
}

bool read_state_moments(const std::string& path, const TrainState& s, const FloatSink& m, const FloatSink& v,
                        std::string* error) {
  FileReader file;
  return file.open(path, error) && read_floats(&file, 1024, s.num_parameters, StoredFloat::kF32, m, 0, error) &&
         read_floats(&file, 1024 + 4 * s.num_parameters, s.num_parameters, StoredFloat::kF32, v, 0, error);
}

bool read_state_master(const std::string& path, const TrainState& s, const FloatSink& master, std::string* error) {
  if (!s.has_master) {
    *error = path + ": holds no master weights";
    return false;
  }
  FileReader file;
  return file.open(path, error) &&
         read_floats(&file, 1024 + 8 * s.num_parameters, s.num_parameters, StoredFloat::kF32, master, 0, error);
}

bool read_state_file(const std::string& path, TrainState* s, std::string* error) {
  if (!read_state_header(path, s, error)) return false;
  s->m.resize(s->num_parameters);
  s->v.resize(s->num_parameters);
  return read_state_moments(path, *s, into_host(&s->m), into_host(&s->v), error);
}

std::vector<int> complete_steps(const std::string& dir, bool need_state) {
  std::vector<int> steps;
  for (const std::string& name : list_dir(dir)) {
    int step = 0;
    char tail = 0;
    // DONE_ and 8 digits, as the markers are named: not "DONE_+0000003" or "DONE_ 0000003",
    // which %8d would take for step 3.
    if (name.size() != 13 || name.find_first_not_of("0123456789", 5) != std::string::npos ||
        std::sscanf(name.c_str(), "DONE_%8d%c", &step, &tail) != 1)
      continue;
    if (path_exists(join_path(dir, model_file_name(step))) &&
        (!need_state || path_exists(join_path(dir, state_file_name(step)))))
      steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

int newest_complete_step(const std::string& dir, bool need_state) {
  const std::vector<int> steps = complete_steps(dir, need_state);
  return steps.empty() ? -1 : steps.front();
}

}  // namespace nfn
