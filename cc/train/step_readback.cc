#include "cc/train/step_readback.h"

namespace nfn {

StepReadback::~StepReadback() {
  for (nfn_event* e : events_) ops_.event_free(ctx_, e);
}

bool StepReadback::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = std::string(what) + ": " + ops_.ctx_last_error(ctx_);
  return false;
}

bool StepReadback::init(std::string* error) {
  if (!host_.alloc(2, 2 * sizeof(float), "page-locked loss buffers", error)) return false;
  for (nfn_event*& e : events_)
    if (!check(ops_.event_create(ctx_, NFN_EVENT_DEFAULT, &e), "step events", error)) return false;
  return true;
}

bool StepReadback::queue(TrainableModel& model, int step, std::string* error) {
  const int slot = step & 1;
  return model.queue_scalars(static_cast<float*>(host_[slot]), error) &&
         check(ops_.event_record(ctx_, events_[slot]), "step event", error);
}

bool StepReadback::ready(int step, bool* done, std::string* error) {
  int d = 0;
  if (!check(ops_.event_query(ctx_, events_[step & 1], &d), "step event", error)) return false;
  *done = d != 0;
  return true;
}

bool StepReadback::wait(int step, float* loss_sum, float* grad_sumsq, std::string* error) {
  const int slot = step & 1;
  if (!check(ops_.event_wait(ctx_, events_[slot]), "waiting for the step", error)) return false;
  const float* v = static_cast<const float*>(host_[slot]);
  *loss_sum = v[0];
  *grad_sumsq = v[1];
  return true;
}

}  // namespace nfn
