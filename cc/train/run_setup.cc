#include "cc/train/run_setup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cc/train/stage_timing.h"
#include "cc/train/step_graph.h"
#include "cc/util/files.h"

namespace nfn {

std::vector<std::tuple<const char*, const char*, const std::string*>> backend_options(const TrainConfig& c) {
  return {{"threads", "threads", &c.threads},          {"matmul", "matmul", &c.matmul},
          {"attention", "attention", &c.attention},    {"gemm-tune", "gemm_tune", &c.gemm_tune},
          {"deterministic", "deterministic", &c.deterministic}, {"overlap", "overlap", &c.overlap},
          {"pdl", "pdl", &c.pdl}, {"lm-head-row-chunk-size", "lm_head_rows", &c.lm_head_rows}};
}

// Whether the library runs attention at the model's geometry (the CUDA library's kernels
// cover head sizes up to 128, and B*NH up to 65535), asked of the library itself
// with one position of each row of a micro-batch, so that a run (and --check, before `nfn
// train` prepares data) learns at once what its first step would. false with the message and
// the exit code: 2 where attention refuses the geometry, 1 where the probe itself fails.
static bool attention_runs(const TrainConfig& c, Backend* backend, const RunSetup& setup, int* code, std::string* error) {
  const nfn_op_table& ops = backend->lib.ops;
  const int B = c.batch_size, C = c.model.channels, NH = c.model.num_heads;
  const size_t elem = setup.dtype == NFN_BF16 ? 2 : 4, qkv_count = 3 * static_cast<size_t>(B) * C;
  void *qkv = nullptr, *out = nullptr, *lse = nullptr;
  *code = 1;
  bool ok = ops.alloc(backend->ctx, qkv_count * elem, &qkv) == NFN_OK &&
            ops.alloc(backend->ctx, static_cast<size_t>(B) * C * elem, &out) == NFN_OK &&
            ops.alloc(backend->ctx, static_cast<size_t>(B) * NH * sizeof(float), &lse) == NFN_OK &&
            ops.fill(backend->ctx, qkv, setup.dtype, 0.0f, qkv_count) == NFN_OK;
  if (ok && ops.attention_forward(backend->ctx, out, static_cast<float*>(lse), qkv, B, 1, NH, NH, C / NH, 0,
                                  setup.dtype) != NFN_OK) {
    ok = false;
    *code = 2;
  }
  ok = ok && ops.synchronize(backend->ctx) == NFN_OK;
  if (!ok)
    *error = "the model (" + std::to_string(NH) + " heads of " + std::to_string(C) + " channels, micro-batch " +
             std::to_string(B) + "): " + ops.ctx_last_error(backend->ctx);
  for (void* p : {qkv, out, lse})
    if (p != nullptr) ops.free(backend->ctx, p);
  return ok;
}

bool setup_backend(const TrainConfig& c, Backend* backend, RunSetup* setup, int* code, std::string* error) {
  *code = 1;
  if (!open_backend(c.backend, c.tile_ops_lib, backend, error)) return false;
  const nfn_op_table& ops = backend->lib.ops;
  *code = 2;
  // A value the library refuses, or cannot run here, is a bad flag: exit 2, as the others.
  for (const auto& [flag, key, value] : backend_options(c))
    if (!value->empty() && ops.ctx_configure(backend->ctx, key, value->c_str()) != NFN_OK) {
      *error = std::string("--") + flag + ": " + ops.ctx_last_error(backend->ctx);
      return false;
    }
  // --matmul unset on the CPU: bf16 GEMMs (f32 accumulation) where the CPU has bf16 units and
  // the library offers them, else f32. The op library itself stays f32 unless told.
  setup->matmul = c.matmul;
  if (backend->name == "cpu" && setup->matmul.empty())
    setup->matmul =
        cpu_has_bf16_units() && ops.ctx_configure(backend->ctx, "matmul", "bf16") == NFN_OK ? "bf16" : "f32";
  setup->dtype_name = !c.dtype.empty() ? c.dtype : (backend->name == "cuda" ? "bf16" : "f32");
  setup->dtype = setup->dtype_name == "bf16" ? NFN_BF16 : NFN_F32;
  if (backend->name == "cpu" && setup->dtype == NFN_BF16) {  // its ops compute and store f32 (support.def)
    *error = "--dtype bf16: the CPU op library stores f32 only (bf16 storage needs --backend cuda; --matmul bf16 "
             "gives the CPU's GEMMs bf16 inputs)";
    return false;
  }
  // Graphs: on needs the library's; auto takes them where it has them (CUDA), and gives them
  // up if the first recording fails, or for --stage-timing (resolve_train_config refuses it
  // with --graphs on), whose events a recording cannot hold.
  if (c.graphs != "off") {
    setup->graphs = StepGraph::supported(ops, backend->ctx, error);
    if (!setup->graphs && c.graphs == "on") {
      *error = "--graphs on: " + *error;
      return false;
    }
    error->clear();
    if (setup->graphs && c.stage_timing) {
      setup->graphs = false;
      setup->graphs_note = "graphs off: --stage-timing records events between the ops, which a recording cannot hold";
    }
  }
  if (c.stage_timing && !StageTiming::supported(ops, backend->ctx, error)) {
    *error = "--stage-timing: " + *error;
    return false;
  }
  return attention_runs(c, backend, *setup, code, error);
}

// Whether `dir` can be made and written, without making it: a file created and removed in it,
// or where it does not exist yet in its nearest existing ancestor, where the run's first
// write goes (access(W_OK) says yes to root on /proc and /sys, where nothing can be made). The
// probe's name is a temp file's (NAME.tmp.PID): one a killed check left in an existing output
// directory is removed by the next run there (in an ancestor, it stays).
bool output_dir_writable(const std::string& dir, std::string* error) {
  std::string at = dir;
  while (!at.empty() && !path_exists(at)) at = dir_name(at) == at ? "" : dir_name(at);
  if (at.empty()) at = ".";
  if (!is_directory(at)) {
    *error = "--output-dir " + dir + ": " + at + " is not a directory";
    return false;
  }
  const std::string probe = join_path(at, ".nfn_write_check.tmp." + std::to_string(::getpid()));
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  int fd = ::open(probe.c_str(), flags, 0600);
  if (fd < 0 && errno == EEXIST && ::unlink(probe.c_str()) == 0) fd = ::open(probe.c_str(), flags, 0600);  // a stale one
  if (fd < 0) {
    *error = "--output-dir " + dir + ": " + at + " is not writable (creating a file there: " + std::strerror(errno) +
             ")";
    return false;
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    *error = "--output-dir " + dir + ": " + probe + ": cannot remove the file made to check the directory: " +
             std::strerror(errno);
    return false;
  }
  return true;
}

bool library_report(const Backend& backend, const char* key, std::string* text) {
  const char* said = backend.lib.ops.ctx_query(backend.ctx, key);
  *text = said != nullptr ? said : "";
  return said != nullptr;
}

}  // namespace nfn
