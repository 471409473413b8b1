// The context's second stream (option overlap=on): work that need not wait for the main
// stream's next kernels runs beside them. linear_backward forks before its input gradient,
// issues the weight and bias gradients on the side (SideSection), and joins before returning, so
// the next op sees everything done, and the scratch and GEMM workspace of one stream are
// never in use by the other. The results are the same kernels' on the same inputs: bit for
// bit those of one stream. Inside a graph recording the fork and join are the graph's edges.
#pragma once

#include "cuda/ops/context.h"

namespace nfn::cuda {

// Makes the side stream wait for everything issued on the main stream so far; *forked says
// whether it did. Not where overlap is off, nor on a context whose side stream does not yet
// exist inside a graph recording (its first use makes it, which a recording cannot hold).
nfn_status side_fork(nfn_ctx* ctx, const char* op, bool* forked);

// A fork's section, made right after side_fork so that every way out of the op joins it.
// After enter() (and once the context's first GEMM has set up cuBLASLt), the context's
// stream, GEMM workspace and scratch are the side stream's, so ops issued through the context
// run there and never share a buffer with the main stream's. join() closes it: back to the
// main stream, which then waits for everything issued on the side. The destructor joins a
// section left open (an op returning early on an error), its own errors ignored. Without a
// fork, all three do nothing.
class SideSection {
 public:
  SideSection(nfn_ctx* ctx, bool forked) : ctx_(ctx), open_(forked), swapped_(false) {}
  ~SideSection();
  SideSection(const SideSection&) = delete;
  SideSection& operator=(const SideSection&) = delete;
  void enter();
  nfn_status join(const char* op);

 private:
  nfn_ctx* ctx_;
  bool open_, swapped_;
};

// Frees the side stream, its events and workspace (ctx_destroy).
void side_release(nfn_ctx* ctx);

}  // namespace nfn::cuda
