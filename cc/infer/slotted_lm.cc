#include "cc/infer/slotted_lm.h"

#include <algorithm>

#include "cc/ops/op_error.h"

namespace nfn {

bool SlottedLM::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = op_error(*ops_, ctx_, what);
  return false;
}

void SlottedLM::reset() {
  std::fill(pos_.begin(), pos_.end(), 0);
  rows_ = 0;
}

bool SlottedLM::resize_slots(int slots, std::string* error) {
  pos_.assign(1, 0);  // slot 0, empty, until the new caches exist
  rows_ = 0;
  if (!alloc_caches(slots, error)) return false;
  pos_.assign(slots, 0);
  return true;
}

bool SlottedLM::set_slots(int slots, std::string* error) {
  if (slots < 1) {
    *error = "slots must be >= 1, got " + std::to_string(slots);
    return false;
  }
  if (slots != this->slots()) return resize_slots(slots, error);
  reset();
  return true;
}

bool SlottedLM::start(const std::vector<PlacedRows>& parts, int n, const int32_t* tokens, std::string* error) {
  if (!ensure_rows(n, error) ||
      !check(ops_->copy(ctx_, token_rows(), tokens, static_cast<size_t>(n) * 4, NFN_HOST_TO_DEVICE),
             "uploading tokens", error) ||
      !run(parts, n, error))
    return false;
  for (const PlacedRows& r : parts) pos_[r.slot] += r.n;
  rows_ = n;
  return true;
}

bool SlottedLM::forward(const int32_t* tokens, int n, std::string* error) {
  *error = check_forward_block(*this, tokens, n);
  return error->empty() && start({{0, pos_[0], 0, n}}, n, tokens, error);
}

bool SlottedLM::forward_slots(const std::vector<SlotRows>& parts, const int32_t* tokens, std::string* error) {
  std::vector<PlacedRows> placed;
  int n = 0;
  *error = place_rows(*this, parts, tokens, &placed, &n);
  return error->empty() && start(placed, n, tokens, error);
}

bool SlottedLM::head_logits(const float* x, int rows, std::vector<float>* out, std::string* error) {
  const int Vp = padded_vocab();
  const float cap = logit_softcap();
  if (!logits_.reserve(rows, Vp, error) ||
      !check(ops_->linear_forward(ctx_, logits_.data(), nullptr, x, head(), nullptr, nullptr, rows, channels(), Vp,
                                  NFN_EPILOGUE_NONE, NFN_F32), "linear_forward (logits)", error) ||
      (cap > 0.f && !check(ops_->softcap_forward(ctx_, logits_.data(), logits_.data(), static_cast<size_t>(rows) * Vp,
                                                 cap, NFN_F32), "softcap_forward", error)))
    return false;
  return logits_.download(rows, vocab_size(), Vp, out, error);
}

bool SlottedLM::logits(bool all_rows, std::vector<float>* out, std::string* error) {
  if (rows_ == 0) {
    *error = "logits: no forward to read";
    return false;
  }
  const int rows = all_rows ? rows_ : 1;
  return head_logits(final_rows() + static_cast<size_t>(rows_ - rows) * channels(), rows, out, error);
}

bool SlottedLM::logits_rows(const std::vector<int>& rows, std::vector<float>* out, std::string* error) {
  *error = check_rows(rows_, rows);
  if (!error->empty()) return false;
  const size_t C = channels();
  for (size_t i = 0; i < rows.size(); ++i)
    if (!check(ops_->copy(ctx_, spare_rows() + i * C, final_rows() + rows[i] * C, C * 4, NFN_DEVICE_TO_DEVICE),
               "copy", error))
      return false;
  return head_logits(spare_rows(), static_cast<int>(rows.size()), out, error);
}

}  // namespace nfn
