#include "cc/infer/engine.h"

#include <chrono>

namespace nfn {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

bool generate(CachedLM* model, const std::vector<int32_t>& prompt, int max_new_tokens,
              const SamplingConfig& sampling, int32_t stop_token, const std::function<bool(int32_t)>& on_token,
              GenerationResult* result, std::string* error, bool append) {
  std::string bad = validate_sampling(sampling);
  if (!bad.empty()) {
    *error = "sampling: " + bad;
    return false;
  }
  if (prompt.empty()) {
    *error = "prompt: empty (give at least one token)";
    return false;
  }
  const int start = append ? model->position() : 0;
  if (static_cast<int>(prompt.size()) > model->max_seq_len() - start) {
    *error = "prompt: " + std::to_string(prompt.size()) + " tokens" +
             (append ? " after the " + std::to_string(start) + " in the cache" : std::string()) +
             (append ? " do not fit" : " is longer than") + " the context of " + std::to_string(model->max_seq_len());
    return false;
  }
  if (max_new_tokens < 0) {
    *error = "max_new_tokens must be >= 0";
    return false;
  }
  *result = GenerationResult{};
  result->stop_reason = "max_new_tokens";
  Sampler sampler(sampling);
  std::vector<float> logits;
  if (!append) model->reset();
  auto t0 = std::chrono::steady_clock::now();
  if (!model->forward(prompt.data(), static_cast<int>(prompt.size()), error) ||
      !model->logits(false, &logits, error))
    return false;
  result->prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < max_new_tokens; ++i) {
    const int32_t next = sampler.sample(logits.data(), model->vocab_size());
    result->tokens.push_back(next);
    if (on_token && !on_token(next)) {
      result->stop_reason = "callback";
      break;
    }
    if (next == stop_token) {
      result->stop_reason = "stop_token";
      break;
    }
    if (i + 1 == max_new_tokens) break;  // the last token needs no forward
    if (model->position() >= model->max_seq_len()) {
      result->stop_reason = "context";
      break;
    }
    if (!model->forward(&next, 1, error) || !model->logits(false, &logits, error)) return false;
  }
  result->decode_seconds = seconds_since(t0);
  return true;
}

}  // namespace nfn
