// The op library a run uses, opened and configured by the run's flags, and what a run checks
// before it reads data: the output directory, and whether attention runs at the model's
// geometry. Errors carry an exit code: 2 for a flag or geometry the library refuses, 1 where
// it cannot load.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "cc/ops/backend.h"
#include "cc/ops/nfn_tile_ops.h"
#include "cc/train/train_config.h"

namespace nfn {

struct RunSetup {
  std::string matmul;  // the CPU's GEMM mode ("" on CUDA)
  std::string dtype_name;
  nfn_dtype dtype = NFN_F32;
  bool graphs = false;
  std::string graphs_note;  // why graphs are off where the library records them, when they are
};

// Backend options (flag, the library's key, the value given), each passed to the op library
// as is: it refuses what it does not have.
std::vector<std::tuple<const char*, const char*, const std::string*>> backend_options(const TrainConfig& c);

// Opens the op library and configures it: the backend options, the CPU's GEMM mode, the
// storage dtype, whether the step records graphs, whether it times the stages of a step
// (--stage-timing), and whether attention runs at the model's geometry. false with the
// message and the exit code.
bool setup_backend(const TrainConfig& c, Backend* backend, RunSetup* setup, int* code, std::string* error);

// Whether `dir` can be made and written, without making it.
bool output_dir_writable(const std::string& dir, std::string* error);

// What the library reports of itself by nfn_ctx_query key (device, attention, fused_epilogues,
// gemm_tune); false where the library does not know the key.
bool library_report(const Backend& backend, const char* key, std::string* text);

}  // namespace nfn
