// A model's training state in the op library's memory: parameters and gradients in the
// storage dtype, the f32 master copy (the parameters themselves in f32), the optimizer's two
// f32 moments per parameter (AdamW's m and v; Muon's momentum is m), and two f32 scalars
// (the loss accumulator, then the gradients' sum of squares). A model lists plan()'s slots
// in its one allocation and calls ready() once the block is there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/trainable.h"
#include "cc/ops/arena.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class ParamState {
 public:
  void bind(const nfn_op_table* ops, nfn_ctx* ctx, nfn_dtype dtype, size_t num_params);
  std::vector<ArenaSlot> plan();
  // After the block is allocated: zeroes the moments, gradients and scalars.
  bool ready(std::string* error);

  size_t size() const { return n_; }
  nfn_dtype dtype() const { return dtype_; }
  size_t esize() const { return dtype_ == NFN_F32 ? 4 : 2; }
  void* param(size_t offset) const { return static_cast<char*>(params_) + offset * esize(); }
  void* grad(size_t offset) const { return static_cast<char*>(grads_) + offset * esize(); }
  float* master(size_t offset) const { return master_ + offset; }
  float* m(size_t offset) const { return m_ + offset; }
  float* v(size_t offset) const { return v_ + offset; }
  void* params() const { return params_; }
  void* grads() const { return grads_; }
  float* loss_sum() const { return loss_sum_; }
  float* grad_sumsq() const { return loss_sum_ + 1; }
  // The param copy adamw/muon steps refresh: null when f32 (the master is the parameters).
  void* param_copy(size_t offset) const { return dtype_ == NFN_F32 ? nullptr : param(offset); }

  bool download(TrainableModel::Stored which, size_t offset, size_t count, float* host, std::string* error);
  bool upload(TrainableModel::Stored which, size_t offset, size_t count, const float* host, std::string* error);
  bool get_gradients(std::vector<float>* host, std::string* error);
  bool zero_grads(std::string* error);
  bool zero_loss(std::string* error);
  bool read_scalars(float* loss_sum, float* grad_sumsq, std::string* error);
  bool queue_scalars(float* host, std::string* error);

 private:
  bool check(nfn_status s, const char* what, std::string* error) const;
  bool range(TrainableModel::Stored which, size_t offset, size_t count, float** at, std::string* error) const;

  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  nfn_dtype dtype_ = NFN_F32;
  size_t n_ = 0;
  void* params_ = nullptr;
  void* grads_ = nullptr;
  float* master_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* loss_sum_ = nullptr;
};

}  // namespace nfn
