// Bindings for the token shard reader (cc/data), so Python tests can check it against numpy.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

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

// Python face of TokenBatchSampler: next() returns fresh (B, T) int32 arrays.
struct PySampler {
  nfn::data::TokenBatchSampler sampler;
  int B = 0, T = 0;

  PySampler(const std::vector<ShardTuple>& shards, int b, int t, uint64_t seed) : B(b), T(t) {
    std::vector<TokenShard> list;
    for (const auto& [path, ntok, width] : shards) list.push_back(TokenShard{path, ntok, width});
    std::string error;
    check(sampler.open(std::move(list), b, t, seed, &error), error);
  }
  std::tuple<I32Matrix, I32Matrix> next() {
    I32Matrix inputs = new_matrix(B, T), targets = new_matrix(B, T);
    std::string error;
    check(sampler.next(inputs.data(), targets.data(), &error), error);
    return {inputs, targets};
  }
  nb::bytes last_window() const {
    const auto& w = sampler.last_window();
    return nb::bytes(reinterpret_cast<const char*>(w.data()), w.size());
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
}

}  // namespace nfn::py
