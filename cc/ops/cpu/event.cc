// Event ops on the CPU: every op has finished when it returns, so an event is done as soon
// as it is recorded and waiting for it returns at once. Events are still real objects, so
// the calls check their arguments as the CUDA library's do.
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

struct nfn_event {};

extern "C" {

nfn_status nfn_event_create(nfn_ctx* ctx, nfn_event** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_create: null output pointer");
  *out = new nfn_event;
  return NFN_OK;
}

nfn_status nfn_event_record(nfn_ctx* ctx, nfn_event* event) {
  NFN_CHECK_CTX(ctx);
  if (event == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "event_record: null event");
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

}  // extern "C"
