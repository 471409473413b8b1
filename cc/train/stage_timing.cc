#include "cc/train/stage_timing.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace nfn {

namespace {

double ms_rounded(double ms) { return std::round(ms * 1e4) / 1e4; }  // to 0.1 us

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

StageTiming::StageTiming(const nfn_op_table& ops, nfn_ctx* ctx, int num_layers, std::string clock)
    : ops_(ops), ctx_(ctx), num_layers_(num_layers), clock_(std::move(clock)) {}

StageTiming::~StageTiming() {
  for (Slot& slot : slots_)
    for (nfn_event* e : slot.events) ops_.event_free(ctx_, e);
}

bool StageTiming::supported(const nfn_op_table& ops, nfn_ctx* ctx, std::string* error) {
  nfn_event *start = nullptr, *end = nullptr;
  float ms = 0;
  const bool ok = ops.event_create(ctx, NFN_EVENT_TIMING, &start) == NFN_OK &&
                  ops.event_create(ctx, NFN_EVENT_TIMING, &end) == NFN_OK &&
                  ops.event_record(ctx, start) == NFN_OK && ops.event_record(ctx, end) == NFN_OK &&
                  ops.event_wait(ctx, end) == NFN_OK && ops.event_elapsed(ctx, start, end, &ms) == NFN_OK;
  if (!ok) *error = std::string("the op library cannot time its stream: ") + ops.ctx_last_error(ctx);
  for (nfn_event* e : {start, end})
    if (e != nullptr) ops.event_free(ctx, e);
  return ok;
}

// Records the slot's next event, made the first time the slot needs that many.
bool StageTiming::record_next(Slot& slot) {
  if (slot.recorded == slot.events.size()) {
    nfn_event* e = nullptr;
    if (ops_.event_create(ctx_, NFN_EVENT_TIMING, &e) != NFN_OK) {
      error_ = std::string("stage timing: ") + ops_.ctx_last_error(ctx_);
      return false;
    }
    slot.events.push_back(e);
  }
  if (ops_.event_record(ctx_, slot.events[slot.recorded]) != NFN_OK) {
    error_ = std::string("stage timing: ") + ops_.ctx_last_error(ctx_);
    return false;
  }
  ++slot.recorded;
  return true;
}

bool StageTiming::begin_step(int step, std::string* error) {
  Slot& slot = slots_[step & 1];
  slot.step = step;
  slot.recorded = 0;
  slot.marks.clear();
  if (!record_next(slot)) {
    *error = error_;
    return false;
  }
  open_ = &slot;
  return true;
}

void StageTiming::mark(Stage stage, int layer) {
  if (open_ == nullptr || !error_.empty()) return;
  if (record_next(*open_)) open_->marks.emplace_back(stage, layer);
}

bool StageTiming::end_step(std::string* error) {
  open_ = nullptr;
  if (error_.empty()) return true;
  *error = error_;
  return false;
}

bool StageTiming::collect(int step, double step_seconds, std::string* error) {
  const Slot& slot = slots_[step & 1];
  if (slot.step != step) {
    *error = "stage timing: step " + std::to_string(step + 1) + " was not timed";
    return false;
  }
  StageTimes t;
  t.step_ms = 1e3 * step_seconds;
  for (std::vector<double>& layers : t.per_layer) layers.assign(num_layers_, 0.0);
  for (size_t i = 0; i < slot.marks.size(); ++i) {
    float ms = 0;
    if (ops_.event_elapsed(ctx_, slot.events[i], slot.events[i + 1], &ms) != NFN_OK) {
      *error = std::string("stage timing: ") + ops_.ctx_last_error(ctx_);
      return false;
    }
    const auto [stage, layer] = slot.marks[i];
    t.total[static_cast<int>(stage)] += ms;
    if (layer >= 0 && layer < num_layers_) t.per_layer[static_cast<int>(stage)][layer] += ms;
  }
  steps_.push_back(std::move(t));
  return true;
}

std::vector<const StageTimes*> StageTiming::timed_steps() const {
  std::vector<const StageTimes*> out;
  for (size_t i = steps_.size() > 1 ? 1 : 0; i < steps_.size(); ++i) out.push_back(&steps_[i]);
  return out;
}

double StageTiming::median_over_steps(const std::function<double(const StageTimes&)>& value) const {
  std::vector<double> v;
  for (const StageTimes* t : timed_steps()) v.push_back(value(*t));
  return median(v);
}

double StageTiming::median_stage(int stage, int layer) const {
  return median_over_steps([&](const StageTimes& t) { return layer < 0 ? t.total[stage] : t.per_layer[stage][layer]; });
}

Json StageTiming::report() const {
  Json r = Json::object();
  r.set("clock", clock_);
  r.set("timed_steps", static_cast<int64_t>(timed_steps().size()));
  if (steps_.empty()) return r;  // a resumed run with nothing left to train
  Json stages = Json::object(), layers = Json::object();
  for (int s = 0; s < kNumStages; ++s) {
    stages.set(stage_name(static_cast<Stage>(s)), ms_rounded(median_stage(s)));
    if (!block_stage(static_cast<Stage>(s))) continue;
    Json per = Json::array();
    for (int l = 0; l < num_layers_; ++l) per.push(ms_rounded(median_stage(s, l)));
    layers.set(stage_name(static_cast<Stage>(s)), per);
  }
  r.set("stage_ms", stages);
  r.set("layer_ms", layers);
  r.set("total_ms", ms_rounded(median_over_steps([](const StageTimes& t) {
          double sum = 0;
          for (double ms : t.total) sum += ms;
          return sum;
        })));
  r.set("step_ms", ms_rounded(median_over_steps([](const StageTimes& t) { return t.step_ms; })));
  return r;
}

// One row a stage, then the sum of the stages' medians and the median of their sum: apart
// where a step's time varies from stage to stage (a busy host), so that the medians leave out
// what lands in another stage each step.
void StageTiming::print_table(std::FILE* out) const {
  if (steps_.empty()) return;
  const Json r = report();
  const double total = r.find("total_ms")->as_number();
  auto share = [&](double ms) { return total > 0 ? 100 * ms / total : 0.0; };
  const long long n = r.find("timed_steps")->as_integer();
  std::fprintf(out, "nfn: stage timing (%s): median of %lld step%s, ms; share of the total; per layer: "
               "fastest-slowest\n", clock_.c_str(), n, n == 1 ? "" : "s");
  std::fprintf(out, "  %-20s %10s %7s\n", "stage", "ms", "share");
  double sum = 0;
  for (int s = 0; s < kNumStages; ++s) {
    const Stage stage = static_cast<Stage>(s);
    const double ms = median_stage(s);
    sum += ms;
    std::fprintf(out, "  %-20s %10.3f %6.1f%%", stage_name(stage), ms, share(ms));
    if (block_stage(stage) && num_layers_ > 0) {
      double lo = median_stage(s, 0), hi = lo;
      for (int l = 1; l < num_layers_; ++l) {
        lo = std::min(lo, median_stage(s, l));
        hi = std::max(hi, median_stage(s, l));
      }
      std::fprintf(out, "   per layer %.3f-%.3f", lo, hi);
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "  %-20s %10.3f %6.1f%%\n", "sum of the medians", sum, share(sum));
  std::fprintf(out, "  %-20s %10.3f %6.1f%%   the step: %.3f ms\n", "total", total, total > 0 ? 100.0 : 0.0,
               r.find("step_ms")->as_number());
}

}  // namespace nfn
