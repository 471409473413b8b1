// Bindings for the dense GPT model on the linked CPU op library, so Python tests can check
// the native forward, backward and optimizer against PyTorch and finite differences.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cc/model/gpt.h"
#include "cc/ops/linked_op_table.h"
#include "py/native/bindings.h"
#include "py/native/ids.h"
#include "py/native/trainable_calls.h"

namespace nb = nanobind;

namespace {

using nfn::py::check;
using nfn::py::check_inputs;
using nfn::py::F32Vector;
using nfn::py::IdArray;
using nfn::py::ids_of;
using nfn::py::Numpy1;
using nfn::py::to_numpy;

nfn::GPTConfig make_config(int max_seq_len, int vocab_size, int num_layers, int num_heads, int channels,
                           int padded_vocab_size) {
  nfn::GPTConfig c;
  c.max_seq_len = max_seq_len;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab_size > 0 ? padded_vocab_size : nfn::pad_vocab(vocab_size);
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.channels = channels;
  std::string bad = nfn::validate_config(c);
  if (!bad.empty()) throw std::invalid_argument("model geometry: " + bad);
  return c;
}

class NativeGPT {
 public:
  NativeGPT(int max_seq_len, int vocab_size, int num_layers, int num_heads, int channels, int padded_vocab_size)
      : ops_(nfn::linked_op_table()) {
    if (ops_.ctx_create(0, &ctx_) != NFN_OK) throw std::runtime_error("cannot create a CPU op context");
    std::string error;
    check(model_.init(&ops_, ctx_, make_config(max_seq_len, vocab_size, num_layers, num_heads, channels,
                                               padded_vocab_size),
                      NFN_F32, &error) &&
              model_.set_parameters(std::vector<float>(model_.num_parameters(), 0.0f), &error),  // not garbage
          error);
  }
  ~NativeGPT() {
    model_.~GPT();
    new (&model_) nfn::GPT();
    ops_.ctx_destroy(ctx_);
  }

  size_t num_parameters() const { return model_.num_parameters(); }

  void configure(const std::string& key, const std::string& value) {
    if (ops_.ctx_configure(ctx_, key.c_str(), value.c_str()) != NFN_OK)
      throw std::invalid_argument(ops_.ctx_last_error(ctx_));
  }

  void set_parameters(F32Vector params) {
    std::vector<float> host(params.data(), params.data() + params.size());
    std::string error;
    check(model_.set_parameters(host, &error), error);
  }

  Numpy1 parameters() { return nfn::py::parameters_of(model_); }
  Numpy1 gradients() { return nfn::py::gradients_of(model_); }

  void zero_grads() {
    std::string error;
    check(model_.zero_grads(&error), error);
  }

  // Mean loss over the batch; with backward, gradients of (sum of losses * grad_scale) are
  // added to the parameter gradients.
  float forward_backward(IdArray input_array, IdArray target_array, bool backward, float grad_scale,
                         nfn::py::WeightArray weights) {
    const float sum = nfn::py::loss_sum(model_, input_array, target_array, model_.config().vocab_size, backward,
                                        grad_scale, &weights);
    return sum / static_cast<float>(input_array.shape(0) * input_array.shape(1));
  }

  // One AdamW step (with global-norm clipping); returns the gradient norm before clipping.
  float optimizer_step(int step, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float max_grad_norm) {
    return nfn::py::step_norm(model_, {step, lr, beta1, beta2, eps, weight_decay, max_grad_norm});
  }

  Numpy1 logits(IdArray input_array, int row) {
    const std::vector<int32_t> inputs = ids_of(input_array, 2, "inputs");
    const int B = static_cast<int>(input_array.shape(0)), T = static_cast<int>(input_array.shape(1));
    check_inputs(inputs, model_.config().vocab_size);
    std::vector<float> out;
    std::string error;
    check(model_.upload_tokens(inputs.data(), nullptr, B, T, &error) && model_.logits_for_row(row, &out, &error),
          error);
    return to_numpy(std::move(out));
  }

 private:
  nfn_op_table ops_;
  nfn_ctx* ctx_ = nullptr;
  nfn::GPT model_;
};

std::vector<std::tuple<std::string, std::vector<size_t>, size_t>> layout_tuples(
    int max_seq_len, int vocab_size, int num_layers, int num_heads, int channels, int padded_vocab_size) {
  std::vector<std::tuple<std::string, std::vector<size_t>, size_t>> out;
  for (const auto& t : nfn::param_layout(
           make_config(max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size)))
    out.emplace_back(t.name, t.shape, t.offset);
  return out;
}

}  // namespace

namespace nfn::py {

void bind_model(nb::module_& m) {
  nb::class_<NativeGPT>(m, "NativeGPT", "The dense GPT model on the CPU op library (f32).")
      .def(nb::init<int, int, int, int, int, int>(), nb::arg("max_seq_len"), nb::arg("vocab_size"),
           nb::arg("num_layers"), nb::arg("num_heads"), nb::arg("channels"), nb::arg("padded_vocab_size") = 0)
      .def_prop_ro("num_parameters", &NativeGPT::num_parameters)
      .def("configure", &NativeGPT::configure)
      .def("set_parameters", &NativeGPT::set_parameters)
      .def("parameters", &NativeGPT::parameters)
      .def("gradients", &NativeGPT::gradients)
      .def("zero_grads", &NativeGPT::zero_grads)
      .def("forward_backward", &NativeGPT::forward_backward, nb::arg("inputs"), nb::arg("targets"),
           nb::arg("backward") = true, nb::arg("grad_scale") = 1.0f, nb::arg("weights").none() = nb::none())
      .def("optimizer_step", &NativeGPT::optimizer_step, nb::arg("step"), nb::arg("lr"), nb::arg("beta1") = 0.9f,
           nb::arg("beta2") = 0.95f, nb::arg("eps") = 1e-8f, nb::arg("weight_decay") = 0.0f,
           nb::arg("max_grad_norm") = 1.0f)
      .def("logits", &NativeGPT::logits, nb::arg("inputs"), nb::arg("row"));
  m.def("gpt_param_layout", &layout_tuples, nb::arg("max_seq_len"), nb::arg("vocab_size"), nb::arg("num_layers"),
        nb::arg("num_heads"), nb::arg("channels"), nb::arg("padded_vocab_size") = 0,
        "[(name, shape, offset)] of the checkpoint parameter layout.");
  m.def("gpt_random_parameters",
        [](int max_seq_len, int vocab_size, int num_layers, int num_heads, int channels, uint64_t seed) {
          return to_numpy(nfn::GPT::random_parameters(
              make_config(max_seq_len, vocab_size, num_layers, num_heads, channels, 0), seed));
        });
}

}  // namespace nfn::py
