// Generation: the prompt is prefilled in one forward, then each new token is sampled from
// the last logits and fed back through the KV cache, one position at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cc/infer/cached_lm.h"
#include "cc/infer/sampler.h"

namespace nfn {

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (not the prompt)
  double prefill_seconds = 0, decode_seconds = 0;
  std::string stop_reason;      // "max_new_tokens", "stop_token", "context" or "callback"
};

// Streams each generated id to on_token (may be empty; returning false stops). Stops at
// max_new_tokens, after emitting stop_token (< 0: none), or when the context is full. The
// last generated id is not fed back. With append, the prompt continues what the cache holds
// (a chat's next turn prefills only its new tokens); otherwise the cache starts empty.
bool generate(CachedLM* model, const std::vector<int32_t>& prompt, int max_new_tokens,
              const SamplingConfig& sampling, int32_t stop_token, const std::function<bool(int32_t)>& on_token,
              GenerationResult* result, std::string* error, bool append = false);

}  // namespace nfn
