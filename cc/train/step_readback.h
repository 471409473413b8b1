// Each optimizer step's loss and gradient norm, read without stalling the device. The copy
// of the two floats is queued into page-locked memory behind the step's ops, with an event
// after it; the host takes them once the event is done, normally while the next step's ops
// are already queued. So the device never waits for the host between steps, and the host
// waits only when it is a step ahead (or must stop: a checkpoint, validation, the end).
#pragma once

#include <string>

#include "cc/model/trainable.h"
#include "cc/ops/host_buffers.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class StepReadback {
 public:
  StepReadback(const nfn_op_table& ops, nfn_ctx* ctx) : ops_(ops), ctx_(ctx), host_(ops, ctx) {}
  ~StepReadback();
  StepReadback(const StepReadback&) = delete;
  StepReadback& operator=(const StepReadback&) = delete;

  bool init(std::string* error);
  // Queues step `step`'s scalars and records its event. Two steps can be in flight: the
  // caller takes step - 2's values (wait) before queueing `step`.
  bool queue(TrainableModel& model, int step, std::string* error);
  // Whether step `step`'s values have arrived, without waiting.
  bool ready(int step, bool* done, std::string* error);
  // Waits for step `step`'s values: the summed loss and the gradients' sum of squares.
  bool wait(int step, float* loss_sum, float* grad_sumsq, std::string* error);

 private:
  bool check(nfn_status s, const char* what, std::string* error) const;

  const nfn_op_table& ops_;
  nfn_ctx* ctx_;
  HostBuffers host_;                   // per slot: two floats
  nfn_event* events_[2] = {nullptr, nullptr};
};

}  // namespace nfn
