// llm.c-compatible checkpoints: model_%08d.bin (v3 fp32 / v5 bf16 parameters),
// state_%08d_%05d.bin (AdamW moments, step, data position, RNG) and DONE_%08d, written last,
// so a checkpoint without its DONE marker is incomplete and never resumed from. What the
// marker holds is the trainer's (cc/train/manifest.h: the checkpoint's manifest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/ckpt/float_stream.h"
#include "cc/ckpt/gpt2_layout.h"

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
bool write_model_file(const std::string& path, const GPTConfig& config, const FloatSource& params, int version,
                      std::string* error);
// Reads header and parameters (widened to f32). Errors name the file and the field.
bool read_model_file(const std::string& path, GPTConfig* config, std::vector<float>* params, std::string* error);
// The same, the parameters streamed into `params` a chunk at a time.
bool read_model_file(const std::string& path, GPTConfig* config, const FloatSink& params, std::string* error);
// Header only: geometry and version, validating the size against the header.
bool read_model_header(const std::string& path, GPTConfig* config, int* version, std::string* error);

struct TrainState {
  int step = 0;                // optimizer steps completed
  uint64_t rng_state = 0;
  int64_t data_epoch = 0, data_shard = 0, data_offset = 0;  // where the next batch starts
  uint64_t num_parameters = 0;
  // The f32 master weights follow m and v (llm.c's use_master_weights): where the model file
  // is bf16, so that a resume starts from the weights the run had, not their rounding.
  bool has_master = false;
  std::vector<float> m, v;  // read_state_file fills them; write_state_file takes sources
};

// `master` (may be NULL): the f32 master weights, stored after m and v (has_master).
bool write_state_file(const std::string& path, const TrainState& state, const FloatSource& m, const FloatSource& v,
                      std::string* error, const FloatSource* master = nullptr);
bool read_state_file(const std::string& path, TrainState* state, std::string* error);
// The state's fields alone (m and v left empty), checked against the file's size.
bool read_state_header(const std::string& path, TrainState* state, std::string* error);
// Its moments streamed into m and v a chunk at a time (state from read_state_header).
bool read_state_moments(const std::string& path, const TrainState& state, const FloatSink& m, const FloatSink& v,
                        std::string* error);
// Its master weights (state.has_master), streamed the same way.
bool read_state_master(const std::string& path, const TrainState& state, const FloatSink& master,
                       std::string* error);

// The steps in `dir` whose DONE marker, model file and state file all exist, newest first: the
// steps a resume can continue. need_state false: marker and model alone, what sampling needs.
std::vector<int> complete_steps(const std::string& dir, bool need_state = true);
// The newest of them; -1 if none.
int newest_complete_step(const std::string& dir, bool need_state = true);

}  // namespace nfn
