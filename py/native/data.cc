// Bindings for the token shard reader and batch samplers (cc/data), so Python tests can check
// them against references written in numpy and Python.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cc/data/best_fit.h"
#include "cc/data/token_shards.h"
#include "py/native/bindings.h"

namespace nb = nanobind;
using nfn::data::TokenShard;

namespace {

using ShardTuple = std::tuple<std::string, int64_t, int>;  // (path, num_tokens, token_bytes)
using I32Matrix = nb::ndarray<nb::numpy, int32_t, nb::ndim<2>>;

std::vector<ShardTuple> to_tuples(const std::vector<TokenShard>& shards) {
  std::vector<ShardTuple> out;
  for (const auto& s : shards) out.emplace_back(s.path, s.num_tokens, s.token_bytes);
  return out;
}

void check(bool ok, const std::string& error) {
  if (!ok) throw std::invalid_argument(error);
}

std::vector<ShardTuple> find_shards(const std::string& path, const std::string& split) {
  std::vector<TokenShard> shards;
  std::string error;
  check(nfn::data::find_shards(path, split, &shards, &error), error);
  return to_tuples(shards);
}

std::vector<ShardTuple> find_validation_siblings(const std::string& train_path) {
  std::vector<TokenShard> shards;
  std::string error;
  check(nfn::data::find_validation_siblings(train_path, &shards, &error), error);
  return to_tuples(shards);
}

I32Matrix new_matrix(int rows, int cols) {
  auto* data = new int32_t[static_cast<size_t>(rows) * cols];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<int32_t*>(p); });
  return I32Matrix(data, {static_cast<size_t>(rows), static_cast<size_t>(cols)}, owner);
}

std::vector<TokenShard> from_tuples(const std::vector<ShardTuple>& shards) {
  std::vector<TokenShard> list;
  for (const auto& [path, ntok, width] : shards) list.push_back(TokenShard{path, ntok, width});
  return list;
}

using SpanTuple = std::tuple<int64_t, int64_t, int64_t>;  // (shard, offset, length)

// Python face of a batch sampler: next() returns fresh (B, T) int32 arrays.
template <class Sampler>
struct PyBatches {
  Sampler sampler;
  int B = 0, T = 0;

  PyBatches(int b, int t) : B(b), T(t) {}
  std::tuple<I32Matrix, I32Matrix> next() {
    I32Matrix inputs = new_matrix(B, T), targets = new_matrix(B, T);
    std::string error;
    check(sampler.next(inputs.data(), targets.data(), &error), error);
    return {inputs, targets};
  }
  std::tuple<int64_t, int64_t, int64_t> position() const {
    auto p = sampler.position();
    return {p.epoch, p.shard, p.offset};
  }
  void seek(int64_t epoch, int64_t shard, int64_t offset) {
    std::string error;
    check(sampler.seek({epoch, shard, offset}, &error), error);
  }
};

struct PySampler : PyBatches<nfn::data::TokenBatchSampler> {
  PySampler(const std::vector<ShardTuple>& shards, int b, int t, uint64_t seed) : PyBatches(b, t) {
    std::string error;
    check(sampler.open(from_tuples(shards), b, t, seed, &error), error);
  }
  nb::bytes last_window() const {
    const auto& w = sampler.last_window();
    return nb::bytes(reinterpret_cast<const char*>(w.data()), w.size());
  }
};

struct PyBestFit : PyBatches<nfn::data::BestFitSampler> {
  PyBestFit(const std::vector<ShardTuple>& shards, int b, int t, uint64_t seed, int64_t bos, int64_t buffer)
      : PyBatches(b, t) {
    std::string error;
    check(sampler.open(from_tuples(shards), b, t, seed, bos, buffer, &error), error);
  }
  std::vector<SpanTuple> buffered() const {
    std::vector<SpanTuple> out;
    for (const auto& d : *sampler.read_ahead()) out.emplace_back(d.shard, d.offset, d.length);
    return out;
  }
  void restore(int64_t epoch, int64_t shard, int64_t offset, const std::vector<SpanTuple>& buffered) {
    std::vector<nfn::data::DocumentSpan> spans;
    for (const auto& [s, o, n] : buffered) spans.push_back({s, o, n});
    std::string error;
    check(sampler.restore({epoch, shard, offset}, spans, &error), error);
  }
};

}  // namespace

namespace nfn::py {

void bind_data(nb::module_& m) {
  m.def("find_shards", &find_shards, nb::arg("path"), nb::arg("split"),
        "[(path, num_tokens, token_bytes)] of a shard directory's split, or of one shard file.");
  m.def("find_validation_siblings", &find_validation_siblings, nb::arg("train_path"),
        "The *_val*.bin shards beside a *_train*.bin shard.");
  m.def("shard_order",
        [](int64_t num_shards, uint64_t seed, int64_t epoch) {
          if (num_shards < 0) throw std::invalid_argument("num_shards must be >= 0 (got " + std::to_string(num_shards) + ")");
          return nfn::data::shard_order(num_shards, seed, epoch);
        },
        nb::arg("num_shards"), nb::arg("seed"), nb::arg("epoch"),
        "The sampler's shard visiting order for one epoch.");
  nb::class_<PySampler>(m, "TokenBatchSampler")
      .def(nb::init<const std::vector<ShardTuple>&, int, int, uint64_t>(), nb::arg("shards"), nb::arg("B"),
           nb::arg("T"), nb::arg("seed") = 0)
      .def("next", &PySampler::next, "(inputs, targets): int32 arrays of shape (B, T).")
      .def("last_window", &PySampler::last_window, "Raw bytes of the last B*T+1 token window.")
      .def("position", &PySampler::position, "(epoch, shard, offset) where the next batch starts.")
      .def("seek", &PySampler::seek, nb::arg("epoch"), nb::arg("shard"), nb::arg("offset"))
      .def("set_vocab_size", [](PySampler& s, int64_t v) { s.sampler.set_vocab_size(v); })
      .def_prop_ro("batches_per_epoch", [](const PySampler& s) { return s.sampler.batches_per_epoch(); })
      .def_prop_ro("token_bytes", [](const PySampler& s) { return s.sampler.token_bytes(); });
  nb::class_<PyBestFit>(m, "BestFitSampler",
                        "BOS-aligned best-fit rows (cc/data/best_fit.h): every row starts at a document's BOS.")
      .def(nb::init<const std::vector<ShardTuple>&, int, int, uint64_t, int64_t, int64_t>(), nb::arg("shards"),
           nb::arg("B"), nb::arg("T"), nb::arg("seed"), nb::arg("bos"), nb::arg("buffer") = 1000)
      .def("next", &PyBestFit::next, "(inputs, targets): int32 arrays of shape (B, T); rows are row[:-1], row[1:].")
      .def("position", &PyBestFit::position, "(epoch, shard, offset) where the stream reads its next document.")
      .def("seek", &PyBestFit::seek, nb::arg("epoch"), nb::arg("shard"), nb::arg("offset"),
           "The stream at that position, the buffer empty.")
      .def("buffered", &PyBestFit::buffered, "[(shard, offset, length)]: the buffer's documents, in its order.")
      .def("restore", &PyBestFit::restore, nb::arg("epoch"), nb::arg("shard"), nb::arg("offset"),
           nb::arg("buffered"), "The stream at that position with those documents buffered.")
      .def("set_vocab_size", [](PyBestFit& s, int64_t v) { s.sampler.set_vocab_size(v); })
      .def_prop_ro("batches_per_epoch", [](const PyBestFit& s) { return s.sampler.batches_per_epoch(); })
      .def_prop_ro("tokens_placed", [](const PyBestFit& s) { return s.sampler.tokens_placed(); })
      .def_prop_ro("tokens_cropped", [](const PyBestFit& s) { return s.sampler.tokens_cropped(); });
}

}  // namespace nfn::py
