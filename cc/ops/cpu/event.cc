// Event ops on the CPU: every op has finished when it returns, so an event is done as soon
// as it is recorded and waiting for it returns at once. Events are still real objects, so
// the calls check their arguments as the CUDA library's do. A timing event keeps the host's
// clock at its record: the ops before it have finished by then, so the time between two
// records is the time of the ops issued between them.
#include <chrono>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

struct nfn_event {
  bool timing = false;
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

extern "C" {

nfn_status nfn_event_create(nfn_ctx* ctx, unsigned flags, nfn_event** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: null output pointer");
  if ((flags & ~unsigned{NFN_EVENT_TIMING}) != 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: unknown flags 0x%x", flags);
  *out = new nfn_event;
  (*out)->timing = (flags & NFN_EVENT_TIMING) != 0;
  return NFN_OK;
}

nfn_status nfn_event_record(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_record: null event");
  event->recorded = true;
  if (event->timing) event->at = std::chrono::steady_clock::now();
  return NFN_OK;
}

nfn_status nfn_event_query(nfn_ctx* ctx, nfn_event* event, int* done) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr || done == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_query: null %s", event == nullptr ? "event" : "output pointer");
  *done = 1;
  return NFN_OK;
}

nfn_status nfn_event_wait(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_wait: null event");
  return NFN_OK;
}

nfn_status nfn_event_free(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  delete event;
  return NFN_OK;
}

nfn_status nfn_event_elapsed(nfn_ctx* ctx, nfn_event* start, nfn_event* end, float* ms) {
  NFN_CHECK_CTX(ctx);
  NFN_REQUIRE(start != nullptr && end != nullptr && ms != nullptr, "event_elapsed: null %s",
              ms == nullptr ? "output pointer" : "event");
  NFN_REQUIRE(start->timing && end->timing, "event_elapsed: the %s event was created without NFN_EVENT_TIMING",
              start->timing ? "end" : "start");
  NFN_REQUIRE(start->recorded && end->recorded, "event_elapsed: the %s event was never recorded",
              start->recorded ? "end" : "start");
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return NFN_OK;
}

}  // extern "C"
