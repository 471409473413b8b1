// What the model bindings (model.cc: the GPT, decoder.cc: nanochat and llama) do alike with a
// model on the CPU op library: f32 vectors out as numpy, ids checked against the vocabulary,
// one forward (and backward) over a batch, one optimizer step.
#pragma once

#include <nanobind/ndarray.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/model/trainable.h"
#include "py/native/ids.h"

namespace nfn::py {

using F32Vector = nanobind::ndarray<const float, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using Numpy1 = nanobind::ndarray<nanobind::numpy, float, nanobind::ndim<1>>;
// Optional per-target weights of a (B, T) batch (None: every target weighs 1).
using WeightArray = nanobind::ndarray<const float, nanobind::ndim<2>, nanobind::c_contig, nanobind::device::cpu>;

inline void check(bool ok, const std::string& error) {
  if (!ok) throw std::runtime_error(error);
}

inline Numpy1 to_numpy(std::vector<float>&& v) {
  auto* heap = new std::vector<float>(std::move(v));
  nanobind::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return Numpy1(heap->data(), {heap->size()}, owner);
}

// Input ids index the embedding's rows: each must be a token of the vocabulary (the ops read no
// bound).
inline void check_inputs(const std::vector<int32_t>& ids, int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      throw std::invalid_argument("input id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

// The parameters (f32 master) or their gradients of a model that has get_parameters/get_gradients.
template <class Model>
Numpy1 parameters_of(Model& model) {
  std::vector<float> host;
  std::string error;
  check(model.get_parameters(&host, &error), error);
  return to_numpy(std::move(host));
}
template <class Model>
Numpy1 gradients_of(Model& model) {
  std::vector<float> host;
  std::string error;
  check(model.get_gradients(&host, &error), error);
  return to_numpy(std::move(host));
}

// The summed loss of a (B, T) batch (each target's times its weight, where weights are given);
// with backward, gradients of that sum times grad_scale are added to the parameter gradients.
inline float loss_sum(TrainableModel& model, IdArray input_array, IdArray target_array, int vocab_size,
                      bool backward, float grad_scale, const WeightArray* weights = nullptr) {
  const std::vector<int32_t> inputs = ids_of(input_array, 2, "inputs"), targets = ids_of(target_array, 2, "targets");
  if (input_array.shape(0) != target_array.shape(0) || input_array.shape(1) != target_array.shape(1))
    throw std::invalid_argument("inputs and targets must have the same (B, T) shape");
  check_inputs(inputs, vocab_size);
  const int B = static_cast<int>(input_array.shape(0)), T = static_cast<int>(input_array.shape(1));
  const bool weighted = weights != nullptr && weights->is_valid();
  if (weighted && (weights->shape(0) != static_cast<size_t>(B) || weights->shape(1) != static_cast<size_t>(T)))
    throw std::invalid_argument("weights must have the (B, T) shape of inputs and targets");
  std::string error;
  float sum = 0, sumsq = 0;
  check(model.upload_tokens(inputs.data(), targets.data(), B, T, &error) &&
            (!weighted || model.upload_target_weights(weights->data(), B, T, &error)) && model.zero_loss(&error) &&
            model.step_forward_backward(backward, grad_scale, &error) && model.read_scalars(&sum, &sumsq, &error),
        error);
  return sum;
}

// One optimizer step; the gradients' global norm.
inline float step_norm(TrainableModel& model, const OptimizerStep& s) {
  std::string error;
  float sum = 0, sumsq = 0;
  check(model.optimizer_step(s, &error) && model.read_scalars(&sum, &sumsq, &error), error);
  return std::sqrt(sumsq);
}

}  // namespace nfn::py
