#include "cc/model/param_state.h"

#include "cc/ops/op_error.h"
#include "cc/util/bf16.h"

namespace nfn {

void ParamState::bind(const nfn_op_table* ops, nfn_ctx* ctx, nfn_dtype dtype, size_t num_params) {
  ops_ = ops;
  ctx_ = ctx;
  dtype_ = dtype;
  n_ = num_params;
}

std::vector<ArenaSlot> ParamState::plan() {
  return {{&params_, n_ * esize()},
          {&grads_, n_ * esize()},
          {reinterpret_cast<void**>(&master_), dtype_ == NFN_F32 ? 0 : n_ * 4},
          {reinterpret_cast<void**>(&m_), n_ * 4},
          {reinterpret_cast<void**>(&v_), n_ * 4},
          {reinterpret_cast<void**>(&loss_sum_), 8}};
}

bool ParamState::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = op_error(*ops_, ctx_, what);
  return false;
}

bool ParamState::ready(std::string* error) {
  if (dtype_ == NFN_F32) master_ = static_cast<float*>(params_);  // f32 training updates params in place
  return check(ops_->fill(ctx_, m_, NFN_F32, 0.f, n_), "zeroing the first moments", error) &&
         check(ops_->fill(ctx_, v_, NFN_F32, 0.f, n_), "zeroing the second moments", error) &&
         check(ops_->fill(ctx_, loss_sum_, NFN_F32, 0.f, 2), "zeroing the scalars", error) && zero_grads(error);
}

bool ParamState::range(TrainableModel::Stored which, size_t offset, size_t count, float** at,
                       std::string* error) const {
  if (offset > n_ || count > n_ - offset) {
    *error = "checkpoint state: elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
             ") are outside the model's " + std::to_string(n_);
    return false;
  }
  using S = TrainableModel::Stored;
  *at = (which == S::kMaster ? master_ : which == S::kFirstMoment ? m_ : v_) + offset;
  return true;
}

bool ParamState::download(TrainableModel::Stored which, size_t offset, size_t count, float* host,
                          std::string* error) {
  float* src = nullptr;
  return range(which, offset, count, &src, error) &&
         check(ops_->copy(ctx_, host, src, count * 4, NFN_DEVICE_TO_HOST), "downloading state", error) &&
         check(ops_->synchronize(ctx_), "synchronize", error);
}

bool ParamState::upload(TrainableModel::Stored which, size_t offset, size_t count, const float* host,
                        std::string* error) {
  float* dst = nullptr;
  if (!range(which, offset, count, &dst, error) ||
      !check(ops_->copy(ctx_, dst, host, count * 4, NFN_HOST_TO_DEVICE), "uploading state", error))
    return false;
  if (which == TrainableModel::Stored::kMaster && dtype_ != NFN_F32 &&
      !check(ops_->convert(ctx_, param(offset), dtype_, dst, NFN_F32, count), "converting parameters", error))
    return false;
  return check(ops_->synchronize(ctx_), "synchronize", error);  // host may be reused at once
}

bool ParamState::get_gradients(std::vector<float>* host, std::string* error) {
  host->resize(n_);
  if (dtype_ == NFN_F32)
    return check(ops_->copy(ctx_, host->data(), grads_, n_ * 4, NFN_DEVICE_TO_HOST), "downloading gradients",
                 error) &&
           check(ops_->synchronize(ctx_), "synchronize", error);
  std::vector<uint16_t> raw(n_);  // bf16 gradients widened on the host (only tests ask for them)
  if (!check(ops_->copy(ctx_, raw.data(), grads_, n_ * 2, NFN_DEVICE_TO_HOST), "downloading gradients", error) ||
      !check(ops_->synchronize(ctx_), "synchronize", error))
    return false;
  for (size_t i = 0; i < n_; ++i) (*host)[i] = bf16_to_f32(raw[i]);
  return true;
}

bool ParamState::zero_grads(std::string* error) {
  return check(ops_->fill(ctx_, grads_, dtype_, 0.f, n_), "zeroing gradients", error);
}

bool ParamState::zero_loss(std::string* error) {
  return check(ops_->fill(ctx_, loss_sum_, NFN_F32, 0.f, 1), "zeroing loss", error);
}

bool ParamState::read_scalars(float* loss_sum, float* grad_sumsq, std::string* error) {
  float both[2];
  if (!queue_scalars(both, error) || !check(ops_->synchronize(ctx_), "synchronize", error)) return false;
  *loss_sum = both[0];
  *grad_sumsq = both[1];
  return true;
}

bool ParamState::queue_scalars(float* host, std::string* error) {
  return check(ops_->copy(ctx_, host, loss_sum_, 8, NFN_DEVICE_TO_HOST), "reading the loss and gradient norm",
               error);
}

}  // namespace nfn
