// llm.c-compatible checkpoints: model_%08d.bin (v3 fp32 / v5 bf16 parameters),
// state_%08d_%05d.bin (AdamW moments, step, data position, RNG) and DONE_%08d, written last,
// so a checkpoint without its DONE marker is incomplete and never resumed from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/gpt_config.h"

namespace nfn {

constexpr int kModelMagic = 20240326;
constexpr int kModelVersionF32 = 3;
constexpr int kModelVersionBF16 = 5;
constexpr int kStateMagic = 20240527;
constexpr int kStateVersion = 1;

std::string model_file_name(int step);
std::string state_file_name(int step, int rank = 0);
std::string done_file_name(int step);

// Writes parameters (f32, in layout order) as version 3 (f32) or 5 (bf16), atomically.
bool write_model_file(const std::string& path, const GPTConfig& config, const std::vector<float>& params,
                      int version, std::string* error);
// Reads header and parameters (widened to f32). Errors name the file and the field.
bool read_model_file(const std::string& path, GPTConfig* config, std::vector<float>* params, std::string* error);
// Header only: geometry and version, validating the size against the header.
bool read_model_header(const std::string& path, GPTConfig* config, int* version, std::string* error);

struct TrainState {
  int step = 0;                // optimizer steps completed
  uint64_t rng_state = 0;
  int64_t data_epoch = 0, data_shard = 0, data_offset = 0;  // where the next batch starts
  uint64_t num_parameters = 0;
  std::vector<float> m, v;
};

bool write_state_file(const std::string& path, const TrainState& state, std::string* error);
bool read_state_file(const std::string& path, TrainState* state, std::string* error);

// Newest step in `dir` whose DONE marker, model file and state file all exist; -1 if none.
int newest_complete_step(const std::string& dir);

}  // namespace nfn
