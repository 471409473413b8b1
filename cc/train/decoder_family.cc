// The decoder families (nanochat, llama): the Decoder model, its initialisation, its weights
// file (safetensors under the checkpoint's model_%08d.bin name, the tensors named as the
// family's own checkpoints name them, the geometry in __metadata__), and samples.
#include <stdlib.h>

#include <algorithm>

#include "cc/ckpt/safetensors.h"
#include "cc/infer/decoder_runtime.h"
#include "cc/infer/engine.h"
#include "cc/model/decoder.h"
#include "cc/model/decoder_weights.h"
#include "cc/train/family.h"
#include "cc/train/resolve_decoder.h"

namespace nfn {

namespace {

class DecoderModelFamily : public ModelFamily {
 public:
  explicit DecoderModelFamily(const TrainConfig& c) : c_(c) {
    recipe_.muon = c.decoder.nanochat();
    recipe_.matrix_lr = static_cast<float>(c.learning_rate);
    recipe_.embedding_lr = static_cast<float>(c.embedding_lr);
    recipe_.unembedding_lr = static_cast<float>(c.unembedding_lr);
    recipe_.scalar_lr = static_cast<float>(c.scalar_lr);
    recipe_.muon_weight_decay = static_cast<float>(c.weight_decay);
    recipe_.lora = c.lora;
  }

  // Under LoRA the parameters (what trains, checkpoints and resumes) are the adapters.
  size_t num_parameters() const override {
    return c_.lora.on() ? lora_num_parameters(c_.decoder, c_.lora) : decoder_num_parameters(c_.decoder);
  }
  size_t memory_bytes(nfn_dtype dtype, int B, int T) const override {
    return Decoder::memory_bytes(c_.decoder, dtype, B, T, c_.lora);
  }
  double flops_per_token(int T) const override { return Decoder::flops_per_token(c_.decoder, T); }

  bool check_weights_file(const std::string& path, const char* what, std::string* error) const override {
    SafetensorsInfo info;
    if (!read_safetensors_header(path, &info, error)) {
      // Not safetensors: say so of an llm.c GPT file, else the reader's why.
      if (weights_family(path) == "gpt") *error = path + ": " + what + " holds a gpt model, not " + c_.model_family;
      return false;
    }
    auto meta = [&](const char* key) {
      auto it = info.metadata.find(key);
      return it == info.metadata.end() ? std::string() : it->second;
    };
    // A LoRA run resumes from its adapters' checkpoint; anything else is the whole model's.
    const bool adapters = c_.lora.on() && std::string(what) == "checkpoint";
    const char* format = adapters ? kLoraWeightsFormat : kDecoderWeightsFormat;
    if (meta("format") != format) {
      *error = path + ": " + what + " is not an nfn " + (adapters ? "LoRA checkpoint" : "decoder weights file") +
               " (its __metadata__ format is \"" + meta("format") + "\", not \"" + format + "\")";
      return false;
    }
    if (adapters && (meta("lora") != lora_json(c_.lora).dump() || meta("base") != base_path())) {
      *error = path + ": " + what + " holds adapters " + meta("lora") + " over " + meta("base") + ", not " +
               lora_json(c_.lora).dump() + " over " + base_path();
      return false;
    }
    if (meta("model_family") != c_.model_family) {
      *error = path + ": " + what + " holds a " + meta("model_family") + " model, not " + c_.model_family;
      return false;
    }
    const std::string want = decoder_geometry_json(c_.decoder).dump();
    if (meta("geometry") != want) {
      *error = path + ": " + what + " geometry " + meta("geometry") + " does not match the model's " + want;
      return false;
    }
    return true;
  }

  bool create(const nfn_op_table* ops, nfn_ctx* ctx, nfn_dtype dtype, int B, int T, std::string* error) override {
    ops_ = ops;
    ctx_ = ctx;
    if (!model_.init(ops, ctx, c_.decoder, dtype, recipe_, error, B, T)) return false;
    return !c_.lora.on() || load_base(error);
  }
  TrainableModel& model() override { return model_; }

  bool initialize(std::string* error) override {
    if (c_.lora.on()) return model_.set_parameters(lora_random_parameters(c_.decoder, c_.lora, c_.seed), error);
    if (c_.weights.empty()) return model_.set_parameters(Decoder::random_parameters(c_.decoder, c_.seed), error);
    return check_weights_file(c_.weights, "weights", error) && read_weights(c_.weights, error);
  }

  bool write_weights(const std::string& path, int version, std::string* error) override {
    std::vector<SafetensorsTensor> tensors;
    for (const DecoderTensor& t : model_.layout())
      tensors.push_back({t.name, t.rows == 1 ? std::vector<size_t>{t.cols} : std::vector<size_t>{t.rows, t.cols},
                         t.offset});
    const std::vector<std::pair<std::string, std::string>> metadata =
        c_.lora.on() ? lora_weights_metadata(c_.decoder, c_.lora, base_path()) : decoder_weights_metadata(c_.decoder);
    const FloatSource master = [this](size_t offset, size_t count, float* dst, std::string* why) {
      return model_.download(TrainableModel::Stored::kMaster, offset, count, dst, why);
    };
    return write_safetensors(path, tensors, metadata, master, version == 5, error);
  }

  bool read_weights(const std::string& path, std::string* error) override {
    SafetensorsInfo info;
    if (!read_safetensors_header(path, &info, error)) return false;
    const FloatSink into = [this](size_t offset, size_t count, const float* src, std::string* why) {
      return model_.upload(TrainableModel::Stored::kMaster, offset, count, src, why);
    };
    for (const DecoderTensor& t : model_.layout()) {
      const std::vector<size_t> shape =
          t.rows == 1 ? std::vector<size_t>{t.cols} : std::vector<size_t>{t.rows, t.cols};
      if (!read_safetensors_tensor(path, info, t.name, shape, t.offset, into, error)) return false;
    }
    return true;
  }

  // Through the KV-cached runtime, in f32 on the same op library, at temperature 1.
  bool sample(int start, int tokens, uint64_t seed, std::vector<int>* out, std::string* error) override {
    std::vector<float> params;
    DecoderRuntime runtime;
    if (!model_.get_parameters(&params, error)) return false;
    if (c_.lora.on()) params = lora_merged(c_.decoder, c_.lora, base_, params);
    if (!runtime.init(ops_, ctx_, c_.decoder, params, error)) return false;
    SamplingConfig sampling;
    sampling.seed = seed;
    GenerationResult result;
    if (!generate(&runtime, {start}, std::min(tokens, c_.decoder.max_seq_len - 1), sampling, -1, nullptr, &result,
                  error))
      return false;
    out->assign(result.tokens.begin(), result.tokens.end());
    return true;
  }

 private:
  // The LoRA base: the --init-from model (a LoRA checkpoint's merged model too), its geometry
  // the run's; kept on the host for the sample's merged model.
  bool load_base(std::string* error) {
    DecoderConfig c;
    if (!read_decoder_weights(c_.weights, &c, &base_, error)) return false;
    if (decoder_geometry_json(c).dump() != decoder_geometry_json(c_.decoder).dump() ||
        c.family != c_.decoder.family) {
      *error = c_.weights + ": the LoRA base's geometry is not the run's";
      return false;
    }
    return model_.set_base(base_, error);
  }
  // The base as a LoRA checkpoint names it: an absolute path.
  std::string base_path() const {
    char* real = realpath(c_.weights.c_str(), nullptr);
    const std::string out = real != nullptr ? real : c_.weights;
    free(real);
    return out;
  }

  const TrainConfig& c_;
  DecoderRecipe recipe_;
  std::vector<float> base_;
  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  Decoder model_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_decoder_family(const TrainConfig& c) {
  return std::make_unique<DecoderModelFamily>(c);
}

}  // namespace nfn
