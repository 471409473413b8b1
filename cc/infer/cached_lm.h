// A language model with a KV cache, as generation and scoring see it: each forward() runs the
// next block of tokens at positions [position(), position() + n), appends their keys and
// values to the cache, and leaves the block's final rows for logits() and losses(). The dense
// GPT (gpt_decoder.h) and the modern decoder (decoder_runtime.h) implement it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nfn {

class CachedLM {
 public:
  virtual ~CachedLM() = default;
  virtual int vocab_size() const = 0;
  virtual int max_seq_len() const = 0;
  virtual int position() const = 0;
  virtual void reset() = 0;
  // Keeps the first `position` positions of the cache and drops the rest (0 <= position <=
  // position()): a scorer prefills a shared context once, then each continuation from there.
  virtual bool truncate(int position, std::string* error) = 0;
  // Token ids must be in [0, vocab_size); the block must fit in the context.
  virtual bool forward(const int32_t* tokens, int n, std::string* error) = 0;
  // Logits (vocab_size floats per row, as the loss sees them) of the last forward: its last
  // row, or all of its rows.
  virtual bool logits(bool all_rows, std::vector<float>* out, std::string* error) = 0;
  // Cross-entropy (nats) of each row of the last forward against targets (n ids).
  virtual bool losses(const int32_t* targets, std::vector<float>* out, std::string* error) = 0;
};

// truncate() for models whose cache needs nothing more than its position moved back.
inline bool cut(int position, int* pos, int* rows, std::string* error) {
  if (position < 0 || position > *pos) {
    *error = "truncate: position " + std::to_string(position) + " is outside the cache's [0, " + std::to_string(*pos) +
             "]";
    return false;
  }
  *pos = position;
  *rows = 0;  // the last forward's rows are gone with it
  return true;
}

// One line for a forward block that cannot run: empty, past the context, or holding an id
// outside the vocabulary; "" when it can.
inline std::string check_forward_block(const CachedLM& m, const int32_t* tokens, int n) {
  if (n < 1 || m.position() + n > m.max_seq_len())
    return "forward: " + std::to_string(n) + " tokens at position " + std::to_string(m.position()) +
           " do not fit the context of " + std::to_string(m.max_seq_len());
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= m.vocab_size())
      return "forward: token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
             std::to_string(m.vocab_size()) + ")";
  return "";
}

// The same for losses' targets against the last forward's rows.
inline std::string check_targets(const CachedLM& m, int rows, const int32_t* targets) {
  if (rows == 0) return "losses: no forward to read";
  for (int i = 0; i < rows; ++i)
    if (targets[i] < 0 || targets[i] >= m.vocab_size())
      return "losses: target id " + std::to_string(targets[i]) + " is outside the vocabulary [0, " +
             std::to_string(m.vocab_size()) + ")";
  return "";
}

}  // namespace nfn
