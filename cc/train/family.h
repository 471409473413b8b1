// What the training loop needs of a model family beyond its TrainableModel: making the model
// on an op library, its first weights, its weights file (llm.c's for GPT-2), a sample from
// it, and its size and cost. The loop (trainer.cc) is written against this and
// TrainableModel only; a family adds one implementation (gpt_family.cc,
// decoder_family.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/model/trainable.h"
#include "cc/ops/nfn_tile_ops.h"
#include "cc/train/train_config.h"
#include "cc/util/json.h"

namespace nfn {

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  // From the config alone, before any op library is open.
  virtual size_t num_parameters() const = 0;
  // The op library's block for the model's state and a B x T micro-batch's activations.
  virtual size_t memory_bytes(nfn_dtype dtype, int B, int T) const = 0;
  virtual double flops_per_token(int T) const = 0;
  // Whether the weights file at `path` holds this model (geometry), else false + why, the
  // file named as `what` ("weights", "checkpoint").
  virtual bool check_weights_file(const std::string& path, const char* what, std::string* error) const = 0;

  // The model on the op library, with room for a B x T micro-batch.
  virtual bool create(const nfn_op_table* ops, nfn_ctx* ctx, nfn_dtype dtype, int B, int T, std::string* error) = 0;
  virtual TrainableModel& model() = 0;
  // A fresh run's weights: --weights where given, else the family's initialisation from the seed.
  virtual bool initialize(std::string* error) = 0;
  // The weights file of a checkpoint: written (version: the file's precision) and read back.
  virtual bool write_weights(const std::string& path, int version, std::string* error) = 0;
  virtual bool read_weights(const std::string& path, std::string* error) = 0;
  // `tokens` ids sampled from the trained weights after `start`, with `seed`.
  virtual bool sample(int start, int tokens, uint64_t seed, std::vector<int>* out, std::string* error) = 0;
};

// The family whose weights file `path` is, from the file alone: "gpt" for an llm.c model
// file, a decoder family from its safetensors __metadata__, "" when it is neither.
std::string weights_family(const std::string& path);

// The family a config names (gpt, gpt2 and gpt3 are one dense GPT; nanochat and llama the
// decoder).
std::unique_ptr<ModelFamily> make_family(const TrainConfig& c);
std::unique_ptr<ModelFamily> make_gpt_family(const TrainConfig& c);      // gpt_family.cc
std::unique_ptr<ModelFamily> make_decoder_family(const TrainConfig& c);  // decoder_family.cc

}  // namespace nfn
