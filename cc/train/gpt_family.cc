// The dense GPT family (gpt, gpt2, gpt3): the GPT model, llm.c's model file, GPT-2's
// initialisation, and samples through the KV-cached decoder.
#include <algorithm>

#include "cc/ckpt/checkpoint.h"
#include "cc/infer/engine.h"
#include "cc/infer/gpt_decoder.h"
#include "cc/model/gpt.h"
#include "cc/train/family.h"
#include "cc/train/mfu.h"

namespace nfn {

namespace {

bool same_geometry(const GPTConfig& a, const GPTConfig& b) {
  return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
         a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
         a.channels == b.channels;
}

class GptFamily : public ModelFamily {
 public:
  explicit GptFamily(const TrainConfig& c) : c_(c) { parse_recompute(c.recompute, &recompute_); }

  size_t num_parameters() const override { return nfn::num_parameters(c_.model); }
  size_t memory_bytes(nfn_dtype dtype, int B, int T) const override {
    return GPT::memory_bytes(c_.model, dtype, B, T, recompute_);
  }
  double flops_per_token(int T) const override {
    return nfn::flops_per_token(num_parameters(), c_.model.num_layers, T, c_.model.channels);
  }

  bool check_weights_file(const std::string& path, const char* what, std::string* error) const override {
    const std::string family = weights_family(path);
    if (!family.empty() && family != "gpt") {
      *error = path + ": " + what + " holds a " + family + " model, not " + c_.model_family;
      return false;
    }
    GPTConfig g;
    int version = 0;
    if (!read_model_header(path, &g, &version, error)) return false;
    if (same_geometry(g, c_.model)) return true;
    *error = path + ": " + what + " geometry " + geometry_json(g).dump() + " does not match the model's " +
             geometry_json(c_.model).dump();
    return false;
  }

  bool create(const nfn_op_table* ops, nfn_ctx* ctx, nfn_dtype dtype, int B, int T, std::string* error) override {
    ops_ = ops;
    ctx_ = ctx;
    return model_.init(ops, ctx, c_.model, dtype, error, B, T, recompute_);
  }
  TrainableModel& model() override { return model_; }

  bool initialize(std::string* error) override {
    if (c_.weights.empty()) return model_.set_parameters(GPT::random_parameters(c_.model, c_.seed), error);
    return check_weights_file(c_.weights, "weights", error) && read_weights(c_.weights, error);
  }

  bool write_weights(const std::string& path, int version, std::string* error) override {
    return write_model_file(path, c_.model, master(), version, error);
  }
  bool read_weights(const std::string& path, std::string* error) override {
    GPTConfig g;
    return read_model_file(path, &g, into(TrainableModel::Stored::kMaster), error);
  }

  // Through the KV-cached engine, in f32 on the same op library, at temperature 1.
  bool sample(int start, int tokens, uint64_t seed, std::vector<int>* out, std::string* error) override {
    std::vector<float> params;
    GPTDecoder decoder;
    if (!model_.get_parameters(&params, error) || !decoder.init(ops_, ctx_, c_.model, params, error)) return false;
    SamplingConfig sampling;
    sampling.seed = seed;
    GenerationResult result;
    if (!generate(&decoder, {start}, std::min(tokens, c_.model.max_seq_len - 1), sampling, -1, nullptr, &result,
                  error))
      return false;
    out->assign(result.tokens.begin(), result.tokens.end());
    return true;
  }

 private:
  FloatSource master() {
    return [this](size_t offset, size_t count, float* dst, std::string* error) {
      return model_.download(TrainableModel::Stored::kMaster, offset, count, dst, error);
    };
  }
  FloatSink into(TrainableModel::Stored which) {
    return [this, which](size_t offset, size_t count, const float* src, std::string* error) {
      return model_.upload(which, offset, count, src, error);
    };
  }

  const TrainConfig& c_;
  GPTRecompute recompute_;  // --recompute (its flag's choices are the names parse_recompute takes)
  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  GPT model_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_gpt_family(const TrainConfig& c) { return std::make_unique<GptFamily>(c); }

}  // namespace nfn
