#include "cc/train/step_graph.h"

namespace nfn {

StepGraph::~StepGraph() { release(); }

void StepGraph::release() {
  if (graph_ != nullptr) ops_->graph_free(ctx_, graph_);
  graph_ = nullptr;
}

bool StepGraph::supported(const nfn_op_table& ops, nfn_ctx* ctx, std::string* error) {
  if (ops.graph_begin(ctx) != NFN_OK) {
    *error = ops.ctx_last_error(ctx);
    return false;
  }
  // An empty recording says nothing more: only end it (a real one reports its own failures).
  nfn_graph* empty = nullptr;
  if (ops.graph_end(ctx, &empty) == NFN_OK) ops.graph_free(ctx, empty);
  return true;
}

bool StepGraph::record(const std::function<bool(std::string*)>& issue, std::string* error) {
  release();
  if (ops_->graph_begin(ctx_) != NFN_OK) {
    *error = std::string("recording the step: ") + ops_->ctx_last_error(ctx_);
    return false;
  }
  std::string why;
  const bool issued = issue(&why);
  // End the recording whatever happened, so the context is usable (and the error its own).
  const bool ended = ops_->graph_end(ctx_, &graph_) == NFN_OK;
  if (!issued || !ended) {
    *error = "recording the step: " + (issued ? std::string(ops_->ctx_last_error(ctx_)) : why);
    release();
    return false;
  }
  ++recordings_;
  return true;
}

bool StepGraph::run(uint64_t version, const std::function<bool(std::string*)>& issue, std::string* error) {
  if (graph_ == nullptr || version != version_) {
    if (!record(issue, error)) return false;
    version_ = version;
  }
  if (ops_->graph_launch(ctx_, graph_) != NFN_OK) {
    *error = std::string("graph_launch: ") + ops_->ctx_last_error(ctx_);
    return false;
  }
  return true;
}

}  // namespace nfn
