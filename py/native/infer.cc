// Bindings for the inference engine: a KV-cached model (the dense GPT, or a nanochat or llama
// decoder read from its weights file) on the linked CPU op library, or on an op library loaded
// at run time (the CUDA one) through the trainer's loader.
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/infer/decoder_runtime.h"
#include "cc/infer/engine.h"
#include "cc/infer/gpt_decoder.h"
#include "cc/model/decoder_weights.h"
#include "cc/util/quant.h"
#include "cc/ops/backend.h"
#include "cc/ops/linked_op_table.h"
#include "py/native/bindings.h"
#include "py/native/ids.h"

namespace nb = nanobind;

namespace {

using F32Vector = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using nfn::py::IdArray;
using nfn::py::ids_of;

void check(bool ok, const std::string& error) {
  if (!ok) throw std::runtime_error(error);
}

// Holds an engine for one call: the decoder and its cache belong to one caller at a time (a
// second thread, or generate's on_token calling back into the engine, is refused, not let
// in to corrupt the cache).
class Busy {
 public:
  explicit Busy(std::atomic<bool>* flag) : flag_(flag) {
    if (flag_->exchange(true))
      throw std::runtime_error("InferenceEngine is in use by another call (another thread, or generate's on_token)");
  }
  ~Busy() { flag_->store(false); }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  std::atomic<bool>* flag_;
};

nb::ndarray<nb::numpy, float, nb::ndim<2>> to_numpy(std::vector<float>&& v, size_t rows, size_t cols) {
  auto* heap = new std::vector<float>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float, nb::ndim<2>>(heap->data(), {rows, cols}, owner);
}

class InferenceEngine {
 public:
  // library "" means the CPU ops linked into this module; otherwise the op library at that
  // path is loaded (and must implement attention_kv_cached).
  InferenceEngine(F32Vector params, int max_seq_len, int vocab_size, int num_layers, int num_heads, int channels,
                  int padded_vocab_size, const std::string& library, int threads) {
    open(library, threads);
    nfn::GPTConfig c;
    c.max_seq_len = max_seq_len, c.vocab_size = vocab_size, c.num_layers = num_layers, c.num_heads = num_heads;
    c.channels = channels, c.padded_vocab_size = padded_vocab_size;
    weight_bytes_ = params.size() * 4;
    auto gpt = std::make_unique<nfn::GPTDecoder>();
    std::string error;
    const bool ok = gpt->init(ops_, ctx_, c, std::vector<float>(params.data(), params.data() + params.size()), &error);
    start(std::move(gpt), ok, error);
  }

  // A nanochat or llama decoder from its weights file (cc/model/decoder_weights.h); quantize
  // "" keeps its weights f32, q8_0, q4_1 or nf4 keeps the block matrices quantized.
  InferenceEngine(const std::string& weights_file, const std::string& library, int threads,
                  const std::string& quantize, int context) {
    const int quant = quantize.empty() ? -1 : nfn::quant::parse_type(quantize);
    if (!quantize.empty() && quant < 0)
      throw std::invalid_argument("quantize: '" + quantize + "' is not q8_0, q4_1 or nf4");
    nfn::DecoderConfig c;
    std::vector<float> params;
    std::string error;
    if (!nfn::read_decoder_weights(weights_file, &c, &params, &error)) throw std::invalid_argument(error);
    open(library, threads);
    auto decoder = std::make_unique<nfn::DecoderRuntime>();
    const bool ok = decoder->init(ops_, ctx_, c, params, &error, quant, context);
    weight_bytes_ = decoder->weight_bytes();
    start(std::move(decoder), ok, error);
  }
  ~InferenceEngine() { release(); }

  std::string backend() const { return ops_->backend_name(); }
  // Positions the cache holds.
  int max_seq_len() const { return decoder_->max_seq_len(); }
  // The weights on the backend, in bytes.
  size_t weight_bytes() const { return weight_bytes_; }
  int position() {
    Busy busy(&busy_);  // not while a call (another thread's, with the GIL released) moves it
    return decoder_->position();
  }
  void reset() {
    Busy busy(&busy_);
    decoder_->reset();
  }
  void truncate(int position) {
    Busy busy(&busy_);
    std::string error;
    check(decoder_->truncate(position, &error), error);
  }

  // Runs tokens through the cache; logits of the last row (1, V) or of every row (n, V).
  nb::ndarray<nb::numpy, float, nb::ndim<2>> forward(IdArray token_array, bool all_logits) {
    const std::vector<int32_t> tokens = ids_of(token_array, 1, "tokens");
    std::string error;
    std::vector<float> out;
    const int n = static_cast<int>(tokens.size());
    Busy busy(&busy_);
    {
      nb::gil_scoped_release unlocked;
      check(decoder_->forward(tokens.data(), n, &error) && decoder_->logits(all_logits, &out, &error), error);
    }
    const size_t V = decoder_->vocab_size();
    return to_numpy(std::move(out), out.size() / V, V);
  }

  // Cross-entropy of each position of a fresh sequence (the cache is reset first).
  nb::ndarray<nb::numpy, float, nb::ndim<2>> losses(IdArray input_array, IdArray target_array) {
    const std::vector<int32_t> inputs = ids_of(input_array, 1, "inputs"), targets = ids_of(target_array, 1, "targets");
    if (inputs.size() != targets.size()) throw std::invalid_argument("inputs and targets differ in length");
    std::string error;
    std::vector<float> out;
    Busy busy(&busy_);
    {
      nb::gil_scoped_release unlocked;
      decoder_->reset();
      check(decoder_->forward(inputs.data(), static_cast<int>(inputs.size()), &error) &&
                decoder_->losses(targets.data(), &out, &error),
            error);
    }
    return to_numpy(std::move(out), 1, inputs.size());
  }

  nb::dict generate(std::vector<int32_t> prompt, int max_new_tokens, float temperature, int top_k, double top_p,
                    uint64_t seed, int32_t stop_token, nb::object on_token, bool append) {
    if (!on_token.is_none() && !PyCallable_Check(on_token.ptr()))
      throw nb::type_error("on_token must be a callable or None");
    Busy busy(&busy_);
    // The engine runs without the GIL (other Python threads go on during a prefill) and takes it
    // back for each on_token; what on_token raises stops generation and is raised here.
    std::exception_ptr raised;
    std::function<bool(int32_t)> stream;  // True goes on, False stops; anything else is refused
    if (!on_token.is_none())
      stream = [&on_token, &raised](int32_t token) {
        nb::gil_scoped_acquire held;
        try {
          nb::object go = on_token(token);
          if (!nb::isinstance<bool>(go))
            throw nb::type_error(("on_token must return True (go on) or False (stop), not " +
                                  nb::cast<std::string>(nb::repr(go)))
                                     .c_str());
          return nb::cast<bool>(go);
        } catch (...) {
          raised = std::current_exception();
          return false;
        }
      };
    nfn::SamplingConfig s;
    s.temperature = temperature, s.top_k = top_k, s.top_p = top_p, s.seed = seed;
    nfn::GenerationResult r;
    std::string error;
    bool ok;
    {
      nb::gil_scoped_release unlocked;
      ok = nfn::generate(decoder_.get(), prompt, max_new_tokens, s, stop_token, stream, &r, &error, append);
    }
    if (raised) std::rethrow_exception(raised);
    check(ok, error);
    nb::dict out;
    out["tokens"] = r.tokens;
    out["prefill_seconds"] = r.prefill_seconds;
    out["decode_seconds"] = r.decode_seconds;
    out["stop_reason"] = r.stop_reason;
    return out;
  }

 private:
  void open(const std::string& library, int threads) {
    std::string error;
    if (library.empty()) {
      linked_ = nfn::linked_op_table();
      ops_ = &linked_;
      check(ops_->ctx_create(0, &ctx_) == NFN_OK, "cannot create a CPU op context");
    } else {
      backend_ = std::make_unique<nfn::Backend>();
      check(nfn::open_backend("", library, backend_.get(), &error), error);
      ops_ = &backend_->lib.ops;
      ctx_ = backend_->ctx;
    }
    if (threads > 0 && ops_->ctx_configure(ctx_, "threads", std::to_string(threads).c_str()) != NFN_OK) {
      error = std::string("threads: ") + ops_->ctx_last_error(ctx_);
      release();
      throw std::invalid_argument(error);
    }
  }

  // Keeps the model init made, or releases everything and throws its error.
  void start(std::unique_ptr<nfn::CachedLM> model, bool ok, std::string error) {
    if (ok) {
      decoder_ = std::move(model);
      return;
    }
    error = std::string(ops_->backend_name()) + " op library: " + error;  // ops_ is gone after release
    model.reset();  // frees backend memory while the context lives
    release();
    throw std::runtime_error(error);
  }

  void release() {
    decoder_.reset();  // frees backend memory while the context lives
    if (backend_) {
      backend_.reset();
    } else if (ctx_ != nullptr) {
      ops_->ctx_destroy(ctx_);
    }
    ctx_ = nullptr;
  }

  nfn_op_table linked_{};
  std::unique_ptr<nfn::Backend> backend_;
  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  std::unique_ptr<nfn::CachedLM> decoder_;
  std::atomic<bool> busy_{false};
  size_t weight_bytes_ = 0;
};

}  // namespace

namespace nfn::py {

void bind_infer(nb::module_& m) {
  nb::class_<InferenceEngine>(m, "InferenceEngine", "KV-cached generation over an op library: a dense GPT from its parameters and geometry, or a nanochat or llama decoder from its weights file (weights_file=...). One call at a time (another thread, or generate's on_token, is refused). on_token(id) returns True to go on, False to stop.")
      .def(nb::init<F32Vector, int, int, int, int, int, int, const std::string&, int>(), nb::arg("params"),
           nb::arg("max_seq_len"), nb::arg("vocab_size"), nb::arg("num_layers"), nb::arg("num_heads"),
           nb::arg("channels"), nb::arg("padded_vocab_size"), nb::arg("library") = "", nb::arg("threads") = 0)
      .def(nb::init<const std::string&, const std::string&, int, const std::string&, int>(), nb::arg("weights_file"),
           nb::arg("library") = "", nb::arg("threads") = 0, nb::arg("quantize") = "", nb::arg("context") = 0)
      .def_prop_ro("max_seq_len", &InferenceEngine::max_seq_len)
      .def_prop_ro("weight_bytes", &InferenceEngine::weight_bytes)
      .def_prop_ro("backend", &InferenceEngine::backend)
      .def_prop_ro("position", &InferenceEngine::position)
      .def("reset", &InferenceEngine::reset)
      .def("truncate", &InferenceEngine::truncate, nb::arg("position"),
           "Keep the cache's first `position` positions (a shared prefix) and drop the rest.")
      .def("forward", &InferenceEngine::forward, nb::arg("tokens"), nb::arg("all_logits") = false)
      .def("losses", &InferenceEngine::losses, nb::arg("inputs"), nb::arg("targets"))
      .def("generate", &InferenceEngine::generate, nb::arg("prompt"), nb::arg("max_new_tokens"),
           nb::arg("temperature") = 1.0f, nb::arg("top_k") = 0, nb::arg("top_p") = 1.0, nb::arg("seed") = 0,
           nb::arg("stop_token") = -1, nb::arg("on_token") = nb::none(), nb::arg("append") = false);
}

}  // namespace nfn::py
