// A training micro-step (forward and backward) recorded once as an op-library graph and then
// replayed with one launch (CUDA graphs on the CUDA library), instead of several hundred
// launches a step. What changes between micro-steps lives in device memory already (the
// tokens are uploaded before each launch, the loss and gradients accumulate in place), so
// the same recording serves every micro-step of the run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class StepGraph {
 public:
  StepGraph(const nfn_op_table* ops, nfn_ctx* ctx) : ops_(ops), ctx_(ctx) {}
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether the op library records graphs: false with its reason in *error if not.
  static bool supported(const nfn_op_table& ops, nfn_ctx* ctx, std::string* error);

  // Launches the recording made for `version` (the buffers' layout, see
  // GPT::activations_version); without one, records `issue` first. The ops `issue` makes
  // must have run once before outside a recording (first-use setup cannot be recorded).
  bool run(uint64_t version, const std::function<bool(std::string*)>& issue, std::string* error);

  int recordings() const { return recordings_; }

 private:
  bool record(const std::function<bool(std::string*)>& issue, std::string* error);
  void release();

  const nfn_op_table* ops_;
  nfn_ctx* ctx_;
  nfn_graph* graph_ = nullptr;
  uint64_t version_ = 0;
  int recordings_ = 0;
};

}  // namespace nfn
