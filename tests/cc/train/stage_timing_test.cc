// StageTiming on the CPU op library, whose timing events read the host's clock: a stage that
// spans a host sleep lasts at least the sleep, and a step's stages add up to no more than the
// host's time from its start to its end; marks outside a step count nowhere; two steps can be
// open by parity; the report's medians leave out the run's first step. Where the library
// cannot time, or an event cannot be recorded, the reason comes back in one line.
#include "cc/train/stage_timing.h"

#include <chrono>
#include <string>
#include <thread>

#include "cc/ops/linked_op_table.h"
#include "tests/cc/expect.h"

namespace {

using Clock = std::chrono::steady_clock;
using nfn::Stage;

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

double number(const nfn::Json& j, const char* object, const char* key) {
  const nfn::Json* o = j.find(object);
  const nfn::Json* v = o != nullptr ? o->find(key) : nullptr;
  return v != nullptr ? v->as_number() : -1;
}

void check_median() {
  EXPECT(nfn::median({3, 1, 2}) == 2 && nfn::median({4, 1, 3, 2}) == 2.5 && nfn::median({}) == 0,
         "median of odd, even and no counts");
}

void check_steps(const nfn_op_table& ops, nfn_ctx* ctx) {
  nfn::StageTiming timing(ops, ctx, 2, "host clock");
  std::string error;
  timing.mark(Stage::kData);  // before any step: nowhere
  // Step 0 (the run's first, left out of the medians) and step 1 open together, as a step
  // is issued before the one before it is read.
  EXPECT(timing.begin_step(0, &error), "begin_step 0: %s", error.c_str());
  sleep_ms(1);
  timing.mark(Stage::kData);
  EXPECT(timing.end_step(&error), "end_step 0: %s", error.c_str());
  const auto start = Clock::now();
  EXPECT(timing.begin_step(1, &error), "begin_step 1: %s", error.c_str());
  sleep_ms(3);
  timing.mark(Stage::kAttentionForward, 1);
  sleep_ms(2);
  timing.mark(Stage::kOptimizer);
  timing.mark(Stage::kLmHead);
  EXPECT(timing.end_step(&error), "end_step 1: %s", error.c_str());
  const double host_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  timing.mark(Stage::kMlpForward, 0);  // after the step: nowhere
  EXPECT(timing.collect(0, 0.010, &error) && timing.collect(1, 0.020, &error), "collect: %s", error.c_str());
  EXPECT(!timing.collect(2, 0.0, &error) && error.find("step 3 was not timed") != std::string::npos,
         "collecting a step never begun: '%s'", error.c_str());

  const nfn::Json r = timing.report();
  EXPECT(r.find("timed_steps")->as_integer() == 1, "the first of two steps is left out");
  EXPECT(r.find("clock")->as_string() == "host clock", "the clock is named");
  const nfn::Json* stages = r.find("stage_ms");
  EXPECT(stages != nullptr && stages->is_object(), "stage_ms");
  for (int s = 0; s < nfn::kNumStages; ++s)
    EXPECT(number(r, "stage_ms", nfn::stage_name(static_cast<Stage>(s))) >= 0, "stage_ms has %s",
           nfn::stage_name(static_cast<Stage>(s)));
  const double attention = number(r, "stage_ms", "attention_forward"), optimizer = number(r, "stage_ms", "optimizer");
  EXPECT(attention >= 3 && optimizer >= 2, "stages cover their sleeps: attention %g ms, optimizer %g ms", attention,
         optimizer);
  EXPECT(number(r, "stage_ms", "data") == 0 && number(r, "stage_ms", "mlp_forward") == 0,
         "step 0's data and a mark outside a step count nowhere");
  const double total = r.find("total_ms")->as_number();
  EXPECT(total >= attention + optimizer - 0.001 && total <= host_ms + 0.001,
         "the stages (%g ms) add up to no more than the step's host time (%g ms)", total, host_ms);
  EXPECT(r.find("step_ms")->as_number() == 20, "step_ms is the timed step's wall time");
  const nfn::Json* layers = r.find("layer_ms")->find("attention_forward");
  EXPECT(layers != nullptr && layers->items().size() == 2 && layers->items()[0].as_number() == 0 &&
             layers->items()[1].as_number() == attention,
         "layer_ms: the attention forward is layer 1's");
  EXPECT(r.find("layer_ms")->find("lm_head") == nullptr, "layer_ms holds the block stages only");
}

// A library whose events cannot be timed, or recorded.
nfn_op_table stub_base;
const char* stub_error = "";
nfn_status refuse_elapsed(nfn_ctx*, nfn_event*, nfn_event*, float*) {
  stub_error = "event_elapsed: no clock here";
  return NFN_ERR_UNSUPPORTED;
}
nfn_status refuse_record(nfn_ctx*, nfn_event*) {
  stub_error = "event_record: the stream is gone";
  return NFN_ERR_BACKEND;
}
const char* stub_last_error(const nfn_ctx*) { return stub_error; }

void check_refusals(nfn_ctx* ctx) {
  nfn_op_table ops = stub_base;
  ops.ctx_last_error = stub_last_error;
  ops.event_elapsed = refuse_elapsed;
  std::string error;
  EXPECT(!nfn::StageTiming::supported(ops, ctx, &error) &&
             error == "the op library cannot time its stream: event_elapsed: no clock here",
         "an op library that cannot time: '%s'", error.c_str());
  EXPECT(nfn::StageTiming::supported(stub_base, ctx, &error), "the CPU library times its stream");
  ops.event_record = refuse_record;
  nfn::StageTiming timing(ops, ctx, 1, "host clock");
  EXPECT(!timing.begin_step(0, &error) && error == "stage timing: event_record: the stream is gone",
         "a failed record at the step's start: '%s'", error.c_str());
  ops.event_record = stub_base.event_record;
  nfn::StageTiming later(ops, ctx, 1, "host clock");
  EXPECT(later.begin_step(0, &error), "begin_step: %s", error.c_str());
  ops.event_record = refuse_record;  // `later` holds the table by reference
  later.mark(Stage::kData);
  EXPECT(!later.end_step(&error) && error.find("the stream is gone") != std::string::npos,
         "a failed record at a mark comes back from end_step: '%s'", error.c_str());
}

}  // namespace

int main() {
  check_median();
  const nfn_op_table ops = nfn::linked_op_table();
  nfn_ctx* ctx = nullptr;
  EXPECT(ops.ctx_create(0, &ctx) == NFN_OK, "ctx_create");
  if (ctx == nullptr) return nfn_test::finish("stage_timing_test");
  check_steps(ops, ctx);
  stub_base = ops;
  check_refusals(ctx);
  ops.ctx_destroy(ctx);
  return nfn_test::finish("stage_timing_test");
}
