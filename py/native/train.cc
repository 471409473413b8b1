// The trainer's own check of a run's flags, in process: `nfn train` asks it before it spends
// minutes preparing a dataset, so a flag the trainer would refuse is reported first, in the
// trainer's words, without a process of its own.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "cc/ops/backend.h"
#include "cc/train/train_flags.h"
#include "cc/train/trainer.h"
#include "cc/util/files.h"
#include "py/native/bindings.h"

namespace nb = nanobind;

namespace nfn::py {

namespace {

// (exit code, message): 0 and "" where a run of `trainer` with these flags would start; else
// what it would stop with (2 for a bad flag). Op libraries are found as `trainer` finds them.
std::pair<int, std::string> check_train(const std::string& trainer, const std::vector<std::string>& flags) {
  set_lookup_executable(trainer);
  std::vector<std::string> args = {"nfn_gpt_native_train"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Flags parsed = train_flags("nfn_gpt_native_train", "");
  TrainConfig config;
  std::string error;
  if (!parsed.parse(static_cast<int>(argv.size()), argv.data(), &error) ||
      !resolve_train_config(parsed, &config, &error))
    return {2, error};
  const int code = check_training(config, &error);
  return {code, code == 0 ? "" : error};
}

// Where `executable` (the trainer) would load the op library of `backend` from ("" where it
// finds none): nfn infer loads the CUDA library the trainer would.
std::string op_library_of(const std::string& backend, const std::string& executable) {
  set_lookup_executable(executable);
  return find_op_library(backend);
}

}  // namespace

void bind_train(nb::module_& m) {
  m.def("find_op_library", &op_library_of, nb::arg("backend"), nb::arg("executable"),
        "Where the binary at `executable` would load the op library of `backend` from ('' where none).");
  m.def("check_train", &check_train, nb::arg("trainer"), nb::arg("flags"),
        "What a run of the trainer binary with these flags checks before it reads data: (0, '') or (exit "
        "code, message).");
}

}  // namespace nfn::py
