#include "cc/infer/engine.h"

#include <chrono>
#include <memory>

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

bool generate_batch(CachedLM* model, const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                    const SamplingConfig& sampling, int32_t stop_token, BatchResult* result, std::string* error) {
  std::string bad = validate_sampling(sampling);
  if (!bad.empty()) {
    *error = "sampling: " + bad;
    return false;
  }
  if (prompts.empty()) {
    *error = "prompts: none given";
    return false;
  }
  if (max_new_tokens < 0) {
    *error = "max_new_tokens must be >= 0";
    return false;
  }
  const int B = static_cast<int>(prompts.size());
  std::vector<SlotRows> parts;
  std::vector<int32_t> tokens;
  std::vector<int> last;  // each prompt's last row in the prefill
  for (int b = 0; b < B; ++b) {
    const int n = static_cast<int>(prompts[b].size());
    if (n == 0 || n > model->max_seq_len()) {
      *error = "prompt " + std::to_string(b) + ": " +
               (n == 0 ? "empty (give at least one token)"
                       : std::to_string(n) + " tokens is longer than the context of " +
                             std::to_string(model->max_seq_len()));
      return false;
    }
    parts.push_back({b, n});
    tokens.insert(tokens.end(), prompts[b].begin(), prompts[b].end());
    last.push_back(static_cast<int>(tokens.size()) - 1);
  }
  *result = BatchResult{};
  result->sequences.resize(B);
  std::vector<std::unique_ptr<Sampler>> samplers;
  for (int b = 0; b < B; ++b) {
    SamplingConfig s = sampling;
    s.seed = sampling.seed + static_cast<uint64_t>(b);
    samplers.push_back(std::make_unique<Sampler>(s));
    result->sequences[b].stop_reason = "max_new_tokens";
  }
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  if (!model->set_slots(B, error) || !model->forward_slots(parts, tokens.data(), error) ||
      !model->logits_rows(last, &logits, error))
    return false;
  result->prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const size_t V = model->vocab_size();
  std::vector<int> going(B);  // the sequences whose logits rows the last forward gave, in order
  for (int b = 0; b < B; ++b) going[b] = b;
  for (int i = 0; i < max_new_tokens && !going.empty(); ++i) {
    parts.clear();
    tokens.clear();
    for (size_t k = 0; k < going.size(); ++k) {
      const int b = going[k];
      GenerationResult& r = result->sequences[b];
      const int32_t next = samplers[b]->sample(logits.data() + k * V, static_cast<int>(V));
      r.tokens.push_back(next);
      if (next == stop_token) {
        r.stop_reason = "stop_token";
        continue;
      }
      if (i + 1 == max_new_tokens) continue;  // the last token needs no forward
      if (model->slot_position(b) >= model->max_seq_len()) {
        r.stop_reason = "context";
        continue;
      }
      parts.push_back({b, 1});
      tokens.push_back(next);
    }
    if (parts.empty()) break;
    going.clear();
    std::vector<int> rows;
    for (const SlotRows& p : parts) {
      rows.push_back(static_cast<int>(going.size()));
      going.push_back(p.slot);
    }
    if (!model->forward_slots(parts, tokens.data(), error) || !model->logits_rows(rows, &logits, error)) return false;
    result->decode_forwards += 1;
    result->decoded_tokens += static_cast<int64_t>(parts.size());
  }
  result->decode_seconds = seconds_since(t0);
  for (GenerationResult& r : result->sequences) {
    r.prefill_seconds = result->prefill_seconds;
    r.decode_seconds = result->decode_seconds;
  }
  return true;
}

}  // namespace nfn
