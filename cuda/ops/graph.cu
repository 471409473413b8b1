// Graph ops: the ops issued between graph_begin and graph_end are captured from the
// context's stream into a CUDA graph, instantiated once and replayed with one launch.
#include "cuda/ops/context.h"

using nfn::cuda::fail;

struct nfn_graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

namespace {

void release_retired_scratch(nfn_ctx* ctx) {
  if (ctx->graphs > 0) return;
  for (void* p : ctx->retired_scratch) cudaFreeAsync(p, ctx->stream);
  ctx->retired_scratch.clear();
}

}  // namespace

extern "C" {

nfn_status nfn_graph_begin(nfn_ctx* ctx) {
  NFN_CHECK_CTX(ctx);
  if (ctx->recording) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_begin: already recording");
  // Global mode, as PyTorch's graphs use: a call anywhere in the process that could not be
  // captured (an allocation, a synchronization) fails instead of silently escaping the graph.
  NFN_CUDA_TRY(ctx, cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeGlobal), "graph_begin");
  ctx->recording = true;
  return NFN_OK;
}

nfn_status nfn_graph_end(nfn_ctx* ctx, nfn_graph** out) {
  NFN_CHECK_CTX(ctx);
  if (out == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_end: null output pointer");
  *out = nullptr;
  if (!ctx->recording) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_end: not recording");
  ctx->recording = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(ctx->stream, &graph);
  if (err != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's failure is reported here, not by a later op
    return fail(ctx, NFN_ERR_BACKEND, "graph_end: the recording failed (%s); an op inside it "
                "allocated, synchronized or copied host memory",
                cudaGetErrorString(err != cudaSuccess ? err : cudaErrorStreamCaptureInvalidated));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();  // reported here, not by the next op (a trainer then runs op by op)
    return nfn::cuda::check(ctx, inst, "graph_end: cudaGraphInstantiate");
  }
  *out = new nfn_graph{graph, exec};
  ++ctx->graphs;
  return NFN_OK;
}

nfn_status nfn_graph_launch(nfn_ctx* ctx, nfn_graph* graph) {
  NFN_CHECK_CTX(ctx);
  if (graph == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_launch: null graph");
  if (ctx->recording) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "graph_launch: inside a recording");
  NFN_CUDA_TRY(ctx, cudaGraphLaunch(graph->exec, ctx->stream), "graph_launch");
  return NFN_OK;
}

nfn_status nfn_graph_free(nfn_ctx* ctx, nfn_graph* graph) {
  NFN_CHECK_CTX(ctx);
  if (graph == nullptr) return NFN_OK;
  NFN_TRY(nfn::cuda::not_recording(ctx, "graph_free"));
  // A launch still queued reads the graph's nodes and the scratch they point at.
  NFN_CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream), "graph_free");
  cudaGraphExecDestroy(graph->exec);
  cudaGraphDestroy(graph->graph);
  delete graph;
  --ctx->graphs;
  release_retired_scratch(ctx);
  return NFN_OK;
}

}  // extern "C"
