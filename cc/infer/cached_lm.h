// A language model with a KV cache, as generation and scoring see it: each forward() runs the
// next block of tokens at positions [position(), position() + n), appends their keys and
// values to the cache, and leaves the block's final rows for logits() and losses(). The dense
// GPT (gpt_decoder.h) and the modern decoder (decoder_runtime.h) implement it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nfn {

// One sequence's part of a batched forward: n tokens of cache slot `slot`, at that slot's next
// positions.
struct SlotRows {
  int slot = 0, n = 0;
};

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

  // Batched generation: `slots` caches of max_seq_len() positions each, one a sequence. forward()
  // and the calls above work on slot 0. Setting the count (>= 1) empties every cache.
  virtual bool set_slots(int slots, std::string* error) = 0;
  virtual int slots() const = 0;
  virtual int slot_position(int slot) const = 0;
  // The parts' rows in one forward (tokens: each part's n ids in turn): every row-wise op and
  // GEMM runs once over all the rows, rotary and attention once a part, each at its slot's
  // positions. A slot appears at most once.
  virtual bool forward_slots(const std::vector<SlotRows>& parts, const int32_t* tokens, std::string* error) = 0;
  // Logits of chosen rows of the last forward (indices into its rows), rows.size() x vocab_size.
  virtual bool logits_rows(const std::vector<int>& rows, std::vector<float>* out, std::string* error) = 0;
};

// A part of a batched forward placed in its rows: its slot, the slot's first position, its
// first row of the forward and its row count.
struct PlacedRows {
  int slot, pos, row0, n;
};

// The parts of forward_slots placed (rows in order), or one line naming what cannot run: a
// slot outside [0, slots) or given twice, an empty part, a part past the context, an id
// outside the vocabulary. *rows gets the total.
inline std::string place_rows(const CachedLM& m, const std::vector<SlotRows>& parts, const int32_t* tokens,
                              std::vector<PlacedRows>* placed, int* rows) {
  placed->clear();
  *rows = 0;
  if (parts.empty()) return "forward: no sequences";
  std::vector<bool> seen(m.slots(), false);
  for (const SlotRows& p : parts) {
    if (p.slot < 0 || p.slot >= m.slots())
      return "forward: slot " + std::to_string(p.slot) + " is outside [0, " + std::to_string(m.slots()) + ")";
    if (seen[p.slot]) return "forward: slot " + std::to_string(p.slot) + " is given twice";
    seen[p.slot] = true;
    const int pos = m.slot_position(p.slot);
    if (p.n < 1 || pos + p.n > m.max_seq_len())
      return "forward: " + std::to_string(p.n) + " tokens at position " + std::to_string(pos) + " of slot " +
             std::to_string(p.slot) + " do not fit the context of " + std::to_string(m.max_seq_len());
    placed->push_back({p.slot, pos, *rows, p.n});
    *rows += p.n;
  }
  for (int i = 0; i < *rows; ++i)
    if (tokens[i] < 0 || tokens[i] >= m.vocab_size())
      return "forward: token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
             std::to_string(m.vocab_size()) + ")";
  return "";
}

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

// The same for logits_rows' indices against the last forward's `last` rows.
inline std::string check_rows(int last, const std::vector<int>& rows) {
  if (last == 0) return "logits: no forward to read";
  if (rows.empty() || rows.size() > static_cast<size_t>(last))
    return "logits: " + std::to_string(rows.size()) + " rows asked of a forward of " + std::to_string(last);
  for (int r : rows)
    if (r < 0 || r >= last)
      return "logits: row " + std::to_string(r) + " is outside the forward's [0, " + std::to_string(last) + ")";
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
