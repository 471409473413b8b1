// Bindings for the modern decoder (nanochat, llama) on the linked CPU op library, so Python
// tests can check its forward, backward and optimizer against PyTorch references.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cc/model/decoder.h"
#include "cc/model/decoder_weights.h"
#include "cc/util/quant.h"
#include "cc/ops/linked_op_table.h"
#include "py/native/bindings.h"
#include "py/native/ids.h"
#include "py/native/trainable_calls.h"

namespace nb = nanobind;

namespace {

using nfn::py::check;
using nfn::py::F32Vector;
using nfn::py::IdArray;
using nfn::py::Numpy1;
using nfn::py::to_numpy;

nfn::DecoderConfig make_config(const std::string& family, int max_seq_len, int vocab_size, int padded_vocab_size,
                               int num_layers, int num_heads, int num_kv_heads, int head_dim, int channels,
                               int hidden, float rope_theta, float norm_eps, bool tied_head,
                               const std::string& window_pattern) {
  if (family != "nanochat" && family != "llama") throw std::invalid_argument("family: nanochat or llama");
  nfn::DecoderConfig c;
  c.family = family == "nanochat" ? nfn::DecoderFamily::kNanochat : nfn::DecoderFamily::kLlama;
  c.max_seq_len = max_seq_len;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab_size > 0 ? padded_vocab_size : vocab_size;
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  c.channels = channels;
  c.hidden = hidden;
  c.rope_theta = rope_theta;
  c.norm_eps = norm_eps;
  c.tied_head = tied_head;
  c.window_pattern = window_pattern;
  const std::string bad = nfn::validate_decoder(c);
  if (!bad.empty()) throw std::invalid_argument("model geometry: " + bad);
  return c;
}

class NativeDecoder {
 public:
  NativeDecoder(const nfn::DecoderConfig& c, bool muon, const nfn::LoraSpec& lora) : ops_(nfn::linked_op_table()) {
    if (ops_.ctx_create(0, &ctx_) != NFN_OK) throw std::runtime_error("cannot create a CPU op context");
    nfn::DecoderRecipe recipe;
    recipe.muon = muon;
    recipe.lora = lora;
    std::string error;
    check(model_.init(&ops_, ctx_, c, NFN_F32, recipe, &error) &&
              model_.set_parameters(std::vector<float>(model_.num_parameters(), 0.0f), &error),
          error);
  }
  ~NativeDecoder() {
    model_.~Decoder();
    new (&model_) nfn::Decoder();
    ops_.ctx_destroy(ctx_);
  }

  size_t num_parameters() const { return model_.num_parameters(); }

  std::vector<std::tuple<std::string, size_t, size_t, size_t>> layout() const {
    std::vector<std::tuple<std::string, size_t, size_t, size_t>> out;
    for (const auto& t : model_.layout()) out.emplace_back(t.name, t.rows, t.cols, t.offset);
    return out;
  }

  // Under LoRA: the frozen base, in decoder_layout's order.
  void set_base(F32Vector params) {
    std::string error;
    check(model_.set_base(std::vector<float>(params.data(), params.data() + params.size()), &error), error);
  }

  // Under LoRA: the whole model the adapters make with `base` (lora_merged).
  Numpy1 merged(F32Vector base) {
    std::vector<float> adapters;
    std::string error;
    check(model_.get_parameters(&adapters, &error), error);
    if (base.size() != nfn::decoder_num_parameters(model_.config()))
      throw std::invalid_argument("merged: the base has " + std::to_string(base.size()) + " values, not " +
                                  std::to_string(nfn::decoder_num_parameters(model_.config())));
    return to_numpy(nfn::lora_merged(model_.config(), model_.lora_spec(),
                                     std::vector<float>(base.data(), base.data() + base.size()), adapters));
  }

  void set_parameters(F32Vector params) {
    std::string error;
    check(model_.set_parameters(std::vector<float>(params.data(), params.data() + params.size()), &error), error);
  }
  Numpy1 parameters() { return nfn::py::parameters_of(model_); }
  Numpy1 gradients() { return nfn::py::gradients_of(model_); }
  void zero_grads() {
    std::string error;
    check(model_.zero_grads(&error), error);
  }

  // The summed loss over the targets that count (>= 0); with backward, gradients of that sum
  // times grad_scale are added to the parameter gradients.
  float forward_backward(IdArray input_array, IdArray target_array, bool backward, float grad_scale) {
    return nfn::py::loss_sum(model_, input_array, target_array, model_.config().vocab_size, backward, grad_scale);
  }

  // One optimizer step (the recipe's); returns the gradients' global norm.
  float optimizer_step(int step, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float max_grad_norm, float lr_factor) {
    nfn::OptimizerStep s{step, lr, beta1, beta2, eps, weight_decay, max_grad_norm};
    s.lr_factor = lr_factor;
    return nfn::py::step_norm(model_, s);
  }

 private:
  nfn_op_table ops_;
  nfn_ctx* ctx_ = nullptr;
  nfn::Decoder model_;
};

}  // namespace

namespace nfn::py {

void bind_decoder(nb::module_& m) {
  nb::class_<NativeDecoder>(m, "NativeDecoder", "The modern decoder (nanochat, llama) on the CPU op library (f32).")
      .def(
          "__init__",
          [](NativeDecoder* self, const std::string& family, int max_seq_len, int vocab_size, int padded_vocab_size,
             int num_layers, int num_heads, int num_kv_heads, int head_dim, int channels, int hidden, float rope_theta,
             float norm_eps, bool tied_head, const std::string& window_pattern, bool muon, int lora_rank,
             float lora_alpha, const std::string& lora_targets, const std::string& lora_quant) {
            nfn::LoraSpec lora;
            lora.rank = lora_rank;
            lora.alpha = lora_alpha;
            if (lora_targets != "all" && lora_targets != "attn" && lora_targets != "mlp")
              throw std::invalid_argument("lora_targets: all, attn or mlp");
            lora.attention = lora_targets != "mlp";
            lora.mlp = lora_targets != "attn";
            lora.quant = lora_quant.empty() ? -1 : nfn::quant::parse_type(lora_quant);
            if (!lora_quant.empty() && lora.quant < 0) throw std::invalid_argument("lora_quant: q8_0, q4_1 or nf4");
            new (self) NativeDecoder(make_config(family, max_seq_len, vocab_size, padded_vocab_size, num_layers,
                                                 num_heads, num_kv_heads, head_dim, channels, hidden, rope_theta,
                                                 norm_eps, tied_head, window_pattern),
                                     muon, lora);
          },
          nb::arg("family"), nb::arg("max_seq_len"), nb::arg("vocab_size"), nb::arg("padded_vocab_size") = 0,
          nb::arg("num_layers"), nb::arg("num_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"),
          nb::arg("channels"), nb::arg("hidden"), nb::arg("rope_theta") = 100000.f, nb::arg("norm_eps") = 1e-5f,
          nb::arg("tied_head") = false, nb::arg("window_pattern") = "L", nb::arg("muon") = true,
          nb::arg("lora_rank") = 0, nb::arg("lora_alpha") = 0.f, nb::arg("lora_targets") = "all",
          nb::arg("lora_quant") = "")
      .def("set_base", &NativeDecoder::set_base, "Under LoRA: the frozen base, in the model's full layout.")
      .def("merged", &NativeDecoder::merged, nb::arg("base"),
           "Under LoRA: the whole model (full layout) its adapters make with `base`.")
      .def_prop_ro("num_parameters", &NativeDecoder::num_parameters)
      .def("layout", &NativeDecoder::layout, "[(name, rows, cols, offset)] in memory order")
      .def("set_parameters", &NativeDecoder::set_parameters)
      .def("parameters", &NativeDecoder::parameters)
      .def("gradients", &NativeDecoder::gradients)
      .def("zero_grads", &NativeDecoder::zero_grads)
      .def("forward_backward", &NativeDecoder::forward_backward, nb::arg("inputs"), nb::arg("targets"),
           nb::arg("backward") = true, nb::arg("grad_scale") = 1.0f)
      .def("optimizer_step", &NativeDecoder::optimizer_step, nb::arg("step"), nb::arg("lr"), nb::arg("beta1") = 0.9f,
           nb::arg("beta2") = 0.95f, nb::arg("eps") = 1e-8f, nb::arg("weight_decay") = 0.0f,
           nb::arg("max_grad_norm") = 0.0f, nb::arg("lr_factor") = 1.0f);
  m.def(
      "read_decoder_weights",
      [](const std::string& path) {
        nfn::DecoderConfig c;
        std::vector<float> params;
        std::string error;
        if (!nfn::read_decoder_weights(path, &c, &params, &error)) throw std::invalid_argument(error);
        std::vector<std::tuple<std::string, size_t, size_t, size_t>> layout;
        for (const auto& t : nfn::decoder_layout(c)) layout.emplace_back(t.name, t.rows, t.cols, t.offset);
        return std::make_tuple(std::string(nfn::decoder_family_name(c.family)), nfn::decoder_geometry_json(c).dump(),
                               layout, to_numpy(std::move(params)));
      },
      nb::arg("path"),
      "(family, geometry JSON, [(name, rows, cols, offset)], f32 parameters) of a decoder weights file; a "
      "LoRA checkpoint gives the model its adapters make with their base.");
  m.def(
      "decoder_random_parameters",
      [](const std::string& family, int max_seq_len, int vocab_size, int padded_vocab_size, int num_layers,
         int num_heads, int num_kv_heads, int head_dim, int channels, int hidden, uint64_t seed) {
        return to_numpy(nfn::Decoder::random_parameters(
            make_config(family, max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, num_kv_heads,
                        head_dim, channels, hidden, 100000.f, 1e-5f, false, "L"),
            seed));
      },
      nb::arg("family"), nb::arg("max_seq_len"), nb::arg("vocab_size"), nb::arg("padded_vocab_size"),
      nb::arg("num_layers"), nb::arg("num_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"), nb::arg("channels"),
      nb::arg("hidden"), nb::arg("seed"));
}

}  // namespace nfn::py
