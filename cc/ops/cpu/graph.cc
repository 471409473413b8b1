// Graph ops on the CPU: there is nothing to record. Each op runs as it is issued, with no
// launch cost a recording could save, so graph_begin says so and the rest have no graph.
#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/context.h"

using nfn::cpu::fail;

extern "C" {

nfn_status nfn_graph_begin(nfn_ctx* ctx) {
  NFN_CHECK_CTX(ctx);
  return fail(ctx, NFN_ERR_UNSUPPORTED,
              "graph_begin: the CPU library runs each op as it is issued and has no graphs");
}

nfn_status nfn_graph_end(nfn_ctx* ctx, nfn_graph** out) {
  NFN_CHECK_CTX(ctx);
  if (out != nullptr) *out = nullptr;
  return fail(ctx, NFN_ERR_UNSUPPORTED, "graph_end: no recording (the CPU library has no graphs)");
}

nfn_status nfn_graph_launch(nfn_ctx* ctx, nfn_graph* /*graph*/) {
  NFN_CHECK_CTX(ctx);
  return fail(ctx, NFN_ERR_UNSUPPORTED, "graph_launch: the CPU library has no graphs");
}

nfn_status nfn_graph_free(nfn_ctx* ctx, nfn_graph* graph) {
  NFN_CHECK_CTX(ctx);
  if (graph == nullptr) return NFN_OK;
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_free: not a graph of this library (the CPU library has none)");
}

}  // extern "C"
