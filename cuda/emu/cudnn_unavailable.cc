// attention=cudnn under the CUDA emulator: cuDNN's kernels are closed binaries for a GPU, so
// the option is refused with this reason (calls never reach cudnn_forward/backward).
#include "cuda/ops/attention_cudnn.h"

namespace nfn::cuda {

namespace {
constexpr const char* kReason = "cuDNN cannot run under the CUDA emulator (its kernels need a GPU)";
}

const char* cudnn_unavailable_reason() { return kReason; }
const char* cudnn_path_name() { return "cudnn (unavailable)"; }
bool cudnn_deterministic(const nfn_ctx* ctx) { return ctx->deterministic; }

nfn_status cudnn_forward(nfn_ctx* ctx, void*, float*, const void*, int, int, int, int) {
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_forward: %s", kReason);
}

nfn_status cudnn_backward(nfn_ctx* ctx, void*, const void*, const void*, const void*, const float*,
                          int, int, int, int) {
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_backward: %s", kReason);
}

void cudnn_release(nfn_ctx*) {}

}  // namespace nfn::cuda
