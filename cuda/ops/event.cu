// Event ops: a CUDA event per nfn_event, recorded on the context's stream, so the host can
// wait for one step's work (and the results it copied into page-locked memory) while the
// next step's work is already queued behind it.
#include "cuda/ops/context.h"

using nfn::cuda::fail;

struct nfn_event {
  cudaEvent_t event = nullptr;
};

extern "C" {

nfn_status nfn_event_create(nfn_ctx* ctx, nfn_event** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: null output pointer");
  *out = nullptr;
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_create"));
  cudaEvent_t e = nullptr;
  // No timing: the cheapest event to record and to wait for.
  NFN_CUDA_TRY(ctx, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event_create");
  *out = new nfn_event{e};
  return NFN_OK;
}

nfn_status nfn_event_record(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_record: null event");
  NFN_TRY(nfn::cuda::not_recording(ctx, "event_record"));
  NFN_CUDA_TRY(ctx, cudaEventRecord(event->event, ctx->stream), "event_record");
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

}  // extern "C"
