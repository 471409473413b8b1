// The dense GPT-2 model (LayerNorm, tanh GELU, learned positions, tied LM head, biases),
// written once against the op ABI: the same code trains on the CPU and CUDA op libraries.
// Each layer's forward and backward are a short list of op calls, as in llm.c.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/gpt_config.h"
#include "cc/model/param_state.h"
#include "cc/ops/arena.h"
#include "cc/model/trainable.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

// Which activations the backward recomputes instead of keeping a copy for every layer: the
// attention half of each block (ln1 and its statistics, qkv, the attention's output and
// log-sum-exp, residual2), rerun from the layer's input, and the MLP's hidden layer (ln2 and
// its statistics, fc's pre-activation and GELU), rerun from residual2. A recomputed tensor
// has one layer's buffer, which every layer's forward writes and each layer's backward fills
// again (the last layer's still holds the forward's). The same ops on the same inputs give
// the same gradients, bit for bit where the op library is deterministic.
struct GPTRecompute {
  bool attention = false, mlp = false;
};
// From "none", "attention", "mlp" or "all"; false when the name is none of them.
bool parse_recompute(const std::string& name, GPTRecompute* out);

// Device-resident training state. `dtype` is the storage of parameters, gradients and
// activations; with bf16, an f32 master copy of the parameters is kept for AdamW.
class GPT : public TrainableModel {
 public:
  GPT() = default;
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // One op-library allocation holds the parameters, gradients, f32 master copy, AdamW
  // moments and, when B and T are given, the activations of a (B, T) micro-batch; another
  // shape later gets an activation block of its own. An upload whose shape the op library
  // cannot give activations fails and leaves the model running the shape it had; only if
  // that shape's own block had to be given up to try is it left without activations (the
  // next upload allocates them).
  bool init(const nfn_op_table* ops, nfn_ctx* ctx, const GPTConfig& config, nfn_dtype dtype,
            std::string* error, int B = 0, int T = 0, GPTRecompute recompute = {});
  const GPTConfig& config() const { return config_; }
  size_t num_parameters() const override { return state_.size(); }
  // The bytes init(..., B, T) asks of the op library in its one block: the model's state in
  // `dtype` and a B x T micro-batch's activations (the op library's own scratch, such as the
  // CUDA LM head's logits, is not in it). B = 0: the state alone.
  static size_t memory_bytes(const GPTConfig& config, nfn_dtype dtype, int B, int T, GPTRecompute recompute = {});

  // GPT-2 initialisation (normal 0.02, residual projections scaled by 1/sqrt(2L), norms 1,
  // biases 0) from `seed`, deterministic on every platform.
  static std::vector<float> random_parameters(const GPTConfig& config, uint64_t seed);
  bool set_parameters(const std::vector<float>& host, std::string* error);
  bool get_parameters(std::vector<float>* host, std::string* error);  // f32 (the master)
  // Parameter gradients as f32 (tests compare them with references).
  bool get_gradients(std::vector<float>* host, std::string* error) { return state_.get_gradients(host, error); }
  // The f32 state a checkpoint holds, copied out (or in, the master's range also converted
  // into the parameters' dtype), and waited for.
  bool download(Stored which, size_t offset, size_t count, float* host, std::string* error) override {
    return state_.download(which, offset, count, host, error);
  }
  bool upload(Stored which, size_t offset, size_t count, const float* host, std::string* error) override {
    return state_.upload(which, offset, count, host, error);
  }

  bool upload_window_u16(const uint16_t* window, int B, int T, std::string* error) override;
  bool upload_tokens(const int32_t* inputs, const int32_t* targets, int B, int T, std::string* error) override;
  bool upload_target_weights(const float* weights, int B, int T, std::string* error) override;
  // With targets, adds the summed loss; grad_scale is 1 / tokens per optimizer step for a
  // mean loss.
  bool step_forward_backward(bool backward, float grad_scale, std::string* error) override;
  // Forward only up to the final LayerNorm, then logits of row `row` (V floats, host).
  bool logits_for_row(int row, std::vector<float>* logits, std::string* error);

  bool zero_grads(std::string* error) override { return state_.zero_grads(error); }
  bool zero_loss(std::string* error) override { return state_.zero_loss(error); }
  // AdamW with clipping; weight decay on matrices and embeddings (ParamTensor::decay).
  bool optimizer_step(const OptimizerStep& s, std::string* error) override;
  bool read_scalars(float* loss_sum, float* grad_sumsq, std::string* error) override {
    return state_.read_scalars(loss_sum, grad_sumsq, error);
  }
  bool queue_scalars(float* host, std::string* error) override { return state_.queue_scalars(host, error); }
  // Changes with a new micro-batch shape (StepGraph holds the activations' addresses).
  uint64_t activations_version() const override { return activations_version_; }
  void set_stage_timer(StageTimer* timer) override { timer_ = timer; }

 private:
  struct Acts;
  struct Layer;
  bool check(nfn_status s, const char* what, std::string* error) const;
  bool ensure_activations(int B, int T, std::string* error);
  void release_activations();
  bool check_sequence_length(int T, std::string* error) const;
  std::vector<ArenaSlot> activation_slots(int B, int T);
  static std::vector<ArenaSlot> activation_plan(const GPTConfig& config, int B, int T, size_t e,
                                                GPTRecompute recompute, Acts* a);
  Layer layer(int l) const;
  bool attention_half(int l, const Layer& x, std::string* error);
  bool mlp_hidden(int l, const Layer& x, std::string* error);
  bool forward(bool with_loss, bool backward, float grad_scale, std::string* error);
  bool backward(std::string* error);
  bool layer_backward(int l, std::string* error);
  bool mlp_half_backward(int l, const Layer& x, std::string* error);
  bool attention_half_backward(int l, const Layer& x, std::string* error);
  void mark(Stage stage, int layer = -1) {
    if (timer_ != nullptr) timer_->mark(stage, layer);
  }
  void* param(int i) const;
  void* grad(int i) const;
  void* layer_slice(void* block, int i, int l) const;
  size_t esize() const { return dtype_ == NFN_F32 ? 4 : 2; }
  void release();

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  GPTConfig config_;
  nfn_dtype dtype_ = NFN_F32;
  GPTRecompute recompute_;
  std::array<ParamTensor, kNumParamTensors> layout_{};
  ParamState state_;

  void* param_block_ = nullptr;  // one allocation: the state[, activations]

  void* act_block_ = nullptr;  // activations of a shape init did not reserve, else null
  int B_ = 0, T_ = 0;
  uint64_t activations_version_ = 0;
  Acts* acts_ = nullptr;
  bool have_inputs_ = false;   // tokens uploaded into the current activations
  bool have_targets_ = false;  // and targets with them
  bool have_weights_ = false;  // and per-target weights (upload_target_weights)
  StageTimer* timer_ = nullptr;
};

}  // namespace nfn
