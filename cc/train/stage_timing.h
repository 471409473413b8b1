// --stage-timing: how long each stage of a training step takes (cc/model/stage_timer.h), from
// the op library's timing events: one recorded where the step begins and one at each mark, so
// the time between an event and the next is the stage that mark names. On CUDA that is the
// GPU's clock (a stage includes any time the GPU waited there for the host to issue its
// work); on the CPU, where every op has finished when it returns, the host's clock at each
// record. A step's events are read once the step is known to be done; two steps can be in
// flight, so there are two sets of events, by the step's parity (as StepReadback's).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cc/model/stage_timer.h"
#include "cc/ops/nfn_tile_ops.h"
#include "cc/util/json.h"

namespace nfn {

// One step's time in each stage, in milliseconds: all of it (every micro-step and layer), and
// each layer's share of the block stages.
struct StageTimes {
  double total[kNumStages] = {};
  std::vector<double> per_layer[kNumStages];
  double step_ms = 0;  // the step's wall time, as the report's step_seconds has it
};

class StageTiming : public StageTimer {
 public:
  // `clock` says what the events read, for the report: "cuda events" or "host clock".
  StageTiming(const nfn_op_table& ops, nfn_ctx* ctx, int num_layers, std::string clock);
  ~StageTiming() override;
  StageTiming(const StageTiming&) = delete;
  StageTiming& operator=(const StageTiming&) = delete;

  // Whether the op library times its stream: two timing events recorded, waited for and read.
  // false with the library's reason.
  static bool supported(const nfn_op_table& ops, nfn_ctx* ctx, std::string* error);

  // Records step `step`'s first event; the marks up to end_step are its stages. Marks outside
  // a step (validation, sampling) are ignored.
  bool begin_step(int step, std::string* error);
  void mark(Stage stage, int layer = -1) override;
  // Closes the step: false with the reason where an event could not be made or recorded.
  bool end_step(std::string* error);
  // Reads step `step`'s stages; the caller has waited for an event recorded after them (the
  // step's scalars).
  bool collect(int step, double step_seconds, std::string* error);

  // The medians over the timed steps: every collected step but the run's first (its
  // first-use setup), unless it is the only one.
  Json report() const;
  // The same as a table, for the end of a run.
  void print_table(std::FILE* out) const;

 private:
  struct Slot {
    int step = -1;
    std::vector<nfn_event*> events;            // events[0]: the step's start
    size_t recorded = 0;                       // events recorded in the step so far
    std::vector<std::pair<Stage, int>> marks;  // marks[i] ends at events[i + 1]
  };
  bool record_next(Slot& slot);
  std::vector<const StageTimes*> timed_steps() const;
  double median_over_steps(const std::function<double(const StageTimes&)>& value) const;
  // A stage's median: all of it, or one layer's.
  double median_stage(int stage, int layer = -1) const;

  const nfn_op_table& ops_;
  nfn_ctx* ctx_;
  int num_layers_;
  std::string clock_;
  Slot slots_[2];
  Slot* open_ = nullptr;  // the step between begin_step and end_step
  std::string error_;     // the first failure of a mark, reported by end_step
  std::vector<StageTimes> steps_;
};

// The median of `values` (the mean of the middle two for an even count; 0 for none).
double median(std::vector<double> values);

}  // namespace nfn
