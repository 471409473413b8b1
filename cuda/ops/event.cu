// Event ops: a CUDA event per nfn_event, recorded on the context's stream, so the host can
// wait for one step's work (and the results it copied into page-locked memory) while the
// next step's work is already queued behind it. A timing event (NFN_EVENT_TIMING) also
// keeps the GPU's clock, for event_elapsed; the others are made without it, the cheapest
// to record and to wait for.
#include "cuda/ops/context.h"

using nfn::cuda::fail;

struct nfn_event {
  cudaEvent_t event = nullptr;
  bool timing = false;
  bool recorded = false;
};

extern "C" {

nfn_status nfn_event_create(nfn_ctx* ctx, unsigned flags, nfn_event** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: null output pointer");
  *out = nullptr;
  if ((flags & ~unsigned{NFN_EVENT_TIMING}) != 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: unknown flags 0x%x", flags);
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_create"));
  const bool timing = (flags & NFN_EVENT_TIMING) != 0;
  cudaEvent_t e = nullptr;
  NFN_CUDA_TRY(ctx, cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
               "event_create");
  *out = new nfn_event{e, timing, false};
  return NFN_OK;
}

nfn_status nfn_event_record(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_record: null event");
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_record"));
  NFN_CUDA_TRY(ctx, cudaEventRecord(event->event, ctx->stream), "event_record");
  event->recorded = true;
  return NFN_OK;
}

nfn_status nfn_event_query(nfn_ctx* ctx, nfn_event* event, int* done) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr || done == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_query: null %s", event == nullptr ? "event" : "output pointer");
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_query"));
  const cudaError_t err = cudaEventQuery(event->event);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: keep it from surfacing at the next launch check
    *done = 0;
    return NFN_OK;
  }
  NFN_CUDA_TRY(ctx, err, "event_query");
  *done = 1;
  return NFN_OK;
}

nfn_status nfn_event_wait(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_wait: null event");
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_wait"));
  NFN_CUDA_TRY(ctx, cudaEventSynchronize(event->event), "event_wait");
  return NFN_OK;
}

nfn_status nfn_event_free(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return NFN_OK;
  // A recorded event still pending is released by CUDA once it completes.
  const cudaError_t err = cudaEventDestroy(event->event);
  delete event;
  NFN_CUDA_TRY(ctx, err, "event_free");
  return NFN_OK;
}

nfn_status nfn_event_elapsed(nfn_ctx* ctx, nfn_event* start, nfn_event* end, float* ms) {
  NFN_CHECK_CTX(ctx);
  if (start == nullptr || end == nullptr || ms == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_elapsed: null %s", ms == nullptr ? "output pointer" : "event");
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_elapsed"));
  if (!start->timing || !end->timing)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_elapsed: the %s event was created without NFN_EVENT_TIMING",
                start->timing ? "end" : "start");
  if (!start->recorded || !end->recorded)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_elapsed: the %s event was never recorded",
                start->recorded ? "end" : "start");
  const cudaError_t err = cudaEventElapsedTime(ms, start->event, end->event);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // the caller's mistake, not the stream's: keep it from the next launch check
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_elapsed: the events' work has not finished (wait for the end "
                "event first)");
  }
  NFN_CUDA_TRY(ctx, err, "event_elapsed");
  return NFN_OK;
}

}  // extern "C"
