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

struct BatchResult {
  std::vector<GenerationResult> sequences;  // each its tokens and stop_reason (times: below)
  double prefill_seconds = 0, decode_seconds = 0;
  int decode_forwards = 0;                  // batched forwards after the prefill
  int64_t decoded_tokens = 0;               // rows those forwards ran (tokens fed back)
};

// Streams each generated id to on_token (may be empty; returning false stops). Stops at
// max_new_tokens, after emitting stop_token (< 0: none), or when the context is full. The
// last generated id is not fed back. With append, the prompt continues what the cache holds
// (a chat's next turn prefills only its new tokens); otherwise the cache starts empty.
bool generate(CachedLM* model, const std::vector<int32_t>& prompt, int max_new_tokens,
              const SamplingConfig& sampling, int32_t stop_token, const std::function<bool(int32_t)>& on_token,
              GenerationResult* result, std::string* error, bool append = false);

// B prompts (each non-empty; lengths may differ) generated together, one cache slot each
// (set_slots(B) empties every cache): all prompts prefilled in one forward, then each step one
// forward of one row for every sequence still going, so the GEMMs run B rows at a time. Each
// sequence stops as generate's does (no callback); sequence b samples from seed sampling.seed + b,
// so with temperature 0 each generates what it would alone.
bool generate_batch(CachedLM* model, const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                    const SamplingConfig& sampling, int32_t stop_token, BatchResult* result, std::string* error);

}  // namespace nfn
