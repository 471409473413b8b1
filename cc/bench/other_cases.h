// The ops a GPT training micro-step does not call on their own (the trainer fuses GELU and
// the residual add into the linears; RMSNorm, rotary embeddings, grouped-query windowed
// attention, ReLU², SwiGLU, soft-capping, scaled sums and gated adds are other families';
// softmax and the KV-cached attention are generation's; memory ops move data), each at the
// shape's sizes.
#pragma once

#include "cc/bench/op_case.h"
#include "cc/bench/shapes.h"

namespace nfn::bench {

// Appends the rmsnorm, GELU, residual, decoder, softmax, KV-cached attention and memory cases
// that sink.want takes: rmsnorm and residual over the (B*T, C) residual stream, GELU over fc's
// (B*T, 4C) activation, rotary embeddings in place on the (B*T, 3C) qkv, attention with
// grouped-query heads and a sliding window (NH/4 kv heads, window T/4), ReLU² and SwiGLU over
// a (B*T, 4C) hidden activation, scaled_sum over the residual stream, gated_add as nanochat's
// value embeddings and smear, the soft-cap and softmax over B rows of the padded vocabulary
// (sampling one token per sequence), attention_kv_cached for the last position of a full
// cache (decoding), fill, convert (f32 to bf16) and widen_tokens over a micro-batch, copy of
// the residual stream.
void add_other_cases(const CaseSink& sink, const Shape& shape);

}  // namespace nfn::bench
