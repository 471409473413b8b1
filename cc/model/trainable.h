// What the training loop needs of a model, whatever its family: token uploads, one
// forward+backward over them, the optimizer step over its parameter groups, the two scalars
// a step reports, and the f32 tensors a checkpoint streams. A family's model implements it
// against the op ABI (gpt.h); the loop (cc/train) sees nothing else of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cc/model/stage_timer.h"

namespace nfn {

// One optimizer step's hyperparameters (AdamW; weight decay applies to the groups that
// decay, as the model groups its parameters).
struct OptimizerStep {
  int step;  // 1-based, for the moments' bias correction
  float lr, beta1, beta2, eps, weight_decay, max_grad_norm;
  // lr over the peak learning rate: the schedule's multiplier, which a model whose groups
  // have learning rates of their own (decoder.h's recipe) applies to each.
  float lr_factor = 1.f;
  // Steps the moments already held when this run began (a warm start that restored them):
  // AdamW's bias correction counts step + moment_steps, as a restored PyTorch optimizer's
  // state['step'] goes on; schedules (Muon's momentum warmup) count `step`.
  int moment_steps = 0;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  virtual size_t num_parameters() const = 0;

  // Tokens for the next forward: one window of B*T+1 uint16 ids (uploaded once, widened on
  // the device), or explicit int32 inputs and targets (targets may be null: no loss).
  virtual bool upload_window_u16(const uint16_t* window, int B, int T, std::string* error) = 0;
  virtual bool upload_tokens(const int32_t* inputs, const int32_t* targets, int B, int T, std::string* error) = 0;
  // Forward over the uploaded tokens, adding the summed loss to the device accumulator; with
  // `backward`, the backward too, accumulating gradients scaled by grad_scale.
  virtual bool step_forward_backward(bool backward, float grad_scale, std::string* error) = 0;
  virtual bool zero_grads(std::string* error) = 0;
  virtual bool zero_loss(std::string* error) = 0;
  // The global gradient norm (on the device), clipping and one optimizer step.
  virtual bool optimizer_step(const OptimizerStep& s, std::string* error) = 0;
  // The loss accumulator and the last gradient sum of squares: read (one synchronisation),
  // or queued into host[0] and host[1] (alloc_host memory: there once an event after it is done).
  virtual bool read_scalars(float* loss_sum, float* grad_sumsq, std::string* error) = 0;
  virtual bool queue_scalars(float* host, std::string* error) = 0;
  // Changes whenever the activation buffers move: a recorded step must be recorded again.
  virtual uint64_t activations_version() const = 0;
  // Where step_forward_backward and optimizer_step end each stage of their work (null: no
  // timer, and no cost). The timer outlives the model's use of it.
  virtual void set_stage_timer(StageTimer* timer) = 0;

  // The f32 state a checkpoint holds, elements [offset, offset + count) at a time.
  enum class Stored { kMaster, kFirstMoment, kSecondMoment };
  virtual bool download(Stored which, size_t offset, size_t count, float* host, std::string* error) = 0;
  virtual bool upload(Stored which, size_t offset, size_t count, const float* host, std::string* error) = 0;
};

}  // namespace nfn
