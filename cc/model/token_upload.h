// Token ids onto the op library for a model's forward: one uint16 window of N+1 ids (inputs
// its first N, targets its last N, widened to int32 on the device), or explicit int32 inputs
// and targets. Shared by every family's TrainableModel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cc/ops/nfn_tile_ops.h"
#include "cc/ops/op_error.h"

namespace nfn {

inline bool upload_token_window(const nfn_op_table& o, nfn_ctx* ctx, uint16_t* window, int32_t* inputs,
                                int32_t* targets, const uint16_t* host, size_t N, std::string* error) {
  const char* failed = o.copy(ctx, window, host, (N + 1) * 2, NFN_HOST_TO_DEVICE) != NFN_OK ? "uploading tokens"
                       : o.widen_tokens(ctx, inputs, window, N) != NFN_OK                 ? "widening inputs"
                       : o.widen_tokens(ctx, targets, window + 1, N) != NFN_OK            ? "widening targets"
                                                                                           : nullptr;
  if (failed != nullptr) *error = op_error(o, ctx, failed);
  return failed == nullptr;
}

// Inputs, then targets unless host_targets is null; *have_inputs and *have_targets say which
// arrived.
inline bool upload_token_ids(const nfn_op_table& o, nfn_ctx* ctx, int32_t* inputs, int32_t* targets,
                             const int32_t* host_inputs, const int32_t* host_targets, size_t N, bool* have_inputs,
                             bool* have_targets, std::string* error) {
  *have_inputs = *have_targets = false;
  if (o.copy(ctx, inputs, host_inputs, N * 4, NFN_HOST_TO_DEVICE) != NFN_OK) {
    *error = op_error(o, ctx, "uploading inputs");
    return false;
  }
  *have_inputs = true;
  if (host_targets == nullptr) return true;
  if (o.copy(ctx, targets, host_targets, N * 4, NFN_HOST_TO_DEVICE) != NFN_OK) {
    *error = op_error(o, ctx, "uploading targets");
    return false;
  }
  *have_targets = true;
  return true;
}

// Per-target weights (N f32) for the tokens uploaded into a (B, T) batch of the same shape.
inline bool upload_weights(const nfn_op_table& o, nfn_ctx* ctx, float* weights, const float* host, int B, int T,
                           int have_B, int have_T, bool have_targets, bool* have_weights, std::string* error) {
  *have_weights = false;
  if (!have_targets || B != have_B || T != have_T) {
    *error = "target weights: upload (" + std::to_string(B) + ", " + std::to_string(T) +
             ") tokens with targets first";
    return false;
  }
  if (o.copy(ctx, weights, host, static_cast<size_t>(B) * T * 4, NFN_HOST_TO_DEVICE) != NFN_OK) {
    *error = op_error(o, ctx, "uploading target weights");
    return false;
  }
  *have_weights = true;
  return true;
}

}  // namespace nfn
