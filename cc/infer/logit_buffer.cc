#include "cc/infer/logit_buffer.h"

#include <algorithm>

#include "cc/ops/op_error.h"

namespace nfn {

void LogitBuffer::release() {
  if (ops_ != nullptr && data_ != nullptr) ops_->free(ctx_, data_);
  data_ = nullptr;
  capacity_ = 0;
}

bool LogitBuffer::reserve(int rows, size_t Vp, std::string* error) {
  const size_t need = static_cast<size_t>(rows) * Vp;
  if (need <= capacity_) return true;
  release();
  void* p = nullptr;
  if (ops_->alloc(ctx_, need * 4, &p) != NFN_OK) {
    *error = op_error(*ops_, ctx_, "allocating logits");
    return false;
  }
  data_ = static_cast<float*>(p);
  capacity_ = need;
  return true;
}

bool LogitBuffer::download(int rows, int V, int Vp, std::vector<float>* out, std::string* error) const {
  std::vector<float> padded(static_cast<size_t>(rows) * Vp);
  if (ops_->copy(ctx_, padded.data(), data_, padded.size() * 4, NFN_DEVICE_TO_HOST) != NFN_OK ||
      ops_->synchronize(ctx_) != NFN_OK) {
    *error = op_error(*ops_, ctx_, "reading logits");
    return false;
  }
  out->resize(static_cast<size_t>(rows) * V);
  for (int r = 0; r < rows; ++r)
    std::copy(padded.begin() + static_cast<size_t>(r) * Vp, padded.begin() + static_cast<size_t>(r) * Vp + V,
              out->begin() + static_cast<size_t>(r) * V);
  return true;
}

}  // namespace nfn
