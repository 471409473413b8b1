// The modern decoder (nanochat and llama, decoder_config.h), written once against the op
// ABI like the GPT: each layer's forward and backward are a short list of op calls, and the
// same code trains on the CPU and CUDA op libraries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/decoder_config.h"
#include "cc/model/frozen_weights.h"
#include "cc/model/lora.h"
#include "cc/model/param_state.h"
#include "cc/model/trainable.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

// The optimizer: nanochat's MuonAdamW (Muon for the blocks' matrices; AdamW for the
// embeddings, the head and the scalars, each group with its own learning rate and betas), or
// AdamW for every tensor (llama; weight decay on matrices and embeddings). Learning rates are
// the peaks; OptimizerStep::lr_factor is the schedule's multiplier at a step.
struct DecoderRecipe {
  bool muon = true;
  // MuonAdamW's learning rates (nanochat's base_train defaults). The AdamW groups of the
  // embeddings and head scale by 1/sqrt(channels / 768), as nanochat does.
  float matrix_lr = 0.02f, embedding_lr = 0.3f, unembedding_lr = 0.004f, scalar_lr = 0.5f;
  float muon_weight_decay = 0.f;
  // Muon's momentum warms from 0.85 to 0.95 over the first 300 steps.
  float muon_momentum = 0.95f, muon_momentum_start = 0.85f;
  int muon_momentum_warmup = 300;
  int ns_steps = 5;
  // LoRA (lora.h): when on, only the adapters train (AdamW at the run's settings), over a
  // frozen base set_base() uploads.
  LoraSpec lora;
};

class Decoder : public TrainableModel {
 public:
  Decoder() = default;
  ~Decoder() override;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // One op-library block holds the state (ParamState) and, when B and T are given, a (B, T)
  // micro-batch's activations; another shape later gets a block of its own.
  bool init(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& config, nfn_dtype dtype,
            const DecoderRecipe& recipe, std::string* error, int B = 0, int T = 0);
  const DecoderConfig& config() const { return config_; }
  const LoraSpec& lora_spec() const { return recipe_.lora; }
  const std::vector<DecoderTensor>& layout() const { return layout_; }
  size_t num_parameters() const override { return state_.size(); }
  // Backend bytes of the state, a (B, T) micro-batch's activations and, under LoRA, the base.
  static size_t memory_bytes(const DecoderConfig& config, nfn_dtype dtype, int B, int T, const LoraSpec& lora = {});
  // Training FLOPs per token: 6 per matmul weight (not the embeddings' lookups) plus the
  // attention scores, 12 x heads x head_dim x each layer's attended context.
  static double flops_per_token(const DecoderConfig& config, int T);

  // The family's initialisation from `seed`: nanochat's init_weights (uniform blocks, zero
  // output projections, its lambdas and gates), llama's (normal 0.02, norm weights 1).
  static std::vector<float> random_parameters(const DecoderConfig& config, uint64_t seed);
  bool set_parameters(const std::vector<float>& host, std::string* error);
  // Under LoRA: the frozen base (decoder_layout's f32 values), kept in the op dtype with its
  // block matrices quantized when the spec asks.
  bool set_base(const std::vector<float>& host, std::string* error);
  bool get_parameters(std::vector<float>* host, std::string* error);
  bool get_gradients(std::vector<float>* host, std::string* error) { return state_.get_gradients(host, error); }
  bool download(Stored which, size_t offset, size_t count, float* host, std::string* error) override {
    return state_.download(which, offset, count, host, error);
  }
  bool upload(Stored which, size_t offset, size_t count, const float* host, std::string* error) override {
    return state_.upload(which, offset, count, host, error);
  }

  bool upload_window_u16(const uint16_t* window, int B, int T, std::string* error) override;
  bool upload_tokens(const int32_t* inputs, const int32_t* targets, int B, int T, std::string* error) override;
  bool step_forward_backward(bool backward, float grad_scale, std::string* error) override;
  bool zero_grads(std::string* error) override { return state_.zero_grads(error); }
  bool zero_loss(std::string* error) override { return state_.zero_loss(error); }
  bool optimizer_step(const OptimizerStep& s, std::string* error) override;
  bool read_scalars(float* loss_sum, float* grad_sumsq, std::string* error) override {
    return state_.read_scalars(loss_sum, grad_sumsq, error);
  }
  bool queue_scalars(float* host, std::string* error) override { return state_.queue_scalars(host, error); }
  uint64_t activations_version() const override { return activations_version_; }
  void set_stage_timer(StageTimer* timer) override { timer_ = timer; }

 private:
  struct Acts;
  struct Layer;
  bool check(nfn_status s, const char* what, std::string* error) const;
  bool ensure_activations(int B, int T, std::string* error);
  void release_activations();
  void release();
  static std::vector<ArenaSlot> activation_plan(const DecoderConfig& c, const LoraSpec& lora, int B, int T, size_t e,
                                                Acts* a);
  Layer layer(int l) const;
  bool lora() const { return recipe_.lora.on(); }
  // A base tensor's element (decoder_layout's numbering), and its gradient (none under LoRA).
  void* p(size_t offset) const { return lora() ? base_.at(offset) : state_.param(offset); }
  void* g(size_t offset) const { return lora() ? nullptr : state_.grad(offset); }
  // A base matrix ready for a GEMM (a quantized base's dequantized into scratch).
  const void* W(size_t offset, std::string* error) const {
    return lora() ? base_.matrix(offset, error) : state_.param(offset);
  }
  bool lora_forward_at(int l, int k, void* y, const void* x, std::string* error);
  bool lora_backward_at(int l, int k, void* dx, const void* dy, const void* x, std::string* error);
  bool embed(std::string* error);
  bool layer_forward(int l, const void* input, std::string* error);
  bool forward(std::string* error);
  bool head_forward(bool backward, float grad_scale, std::string* error);
  bool backward(std::string* error);
  bool mlp_backward(int l, const Layer& x, std::string* error);
  bool attention_backward(int l, const Layer& x, std::string* error);
  bool embed_backward(std::string* error);
  bool adamw_groups(const OptimizerStep& s, std::string* error);
  bool muon_groups(const OptimizerStep& s, std::string* error);
  void mark(Stage stage, int layer = -1) {
    if (timer_ != nullptr) timer_->mark(stage, layer);
  }

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  DecoderConfig config_;
  DecoderRecipe recipe_;
  nfn_dtype dtype_ = NFN_F32;
  std::vector<DecoderTensor> layout_;
  std::vector<int> windows_;
  DecoderOffsets off_;  // where the forward finds each tensor
  std::vector<std::array<LoraTarget, kLoraMatrices>> lora_at_;  // each layer's adapters
  FrozenWeights base_;  // under LoRA: the base
  ParamState state_;

  void* block_ = nullptr;      // state (and the activations init reserved)
  void* act_block_ = nullptr;  // activations of a later shape
  int B_ = 0, T_ = 0;
  uint64_t activations_version_ = 0;
  Acts* acts_ = nullptr;
  bool have_inputs_ = false, have_targets_ = false;
  StageTimer* timer_ = nullptr;
};

}  // namespace nfn
