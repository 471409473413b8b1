#include "cc/train/trainer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/data/token_shards.h"
#include "cc/infer/engine.h"
#include "cc/model/gpt.h"
#include "cc/ops/host_buffers.h"
#include "cc/train/backend.h"
#include "cc/train/manifest.h"
#include "cc/train/mfu.h"
#include "cc/train/schedule.h"
#include "cc/train/step_graph.h"
#include "cc/train/step_readback.h"
#include "cc/train/train_log.h"
#include "cc/util/files.h"
#include "cc/util/rng.h"

namespace nfn {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One line on stderr; the exit code: 1, or 2 for a bad flag.
int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "nfn_gpt_native_train: error: %s\n", message.c_str());
  return code;
}

// Whether the CPU has bf16 dot-product units (AVX512-BF16 or AMX-BF16): where it has, bf16
// GEMMs are the CPU trainer's default (1.64x the f32 step on a 2-core Zen 4, 2026-12-01);
// AVX-512 without them would run oneDNN's bf16 emulated, slower than f32.
bool cpu_has_bf16_units() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

struct Phases {
  double data = 0, forward_backward = 0, optimizer = 0, wait = 0, validation = 0, checkpoint = 0;
};

// Where a run starts: fresh, or the newest complete checkpoint.
struct Start {
  int step = 0;
  std::string run_id;  // a fresh run's new id, or the id of the run it resumes
  std::string shards;  // the training shards its run read, as shard_list ("" where unknown)
  bool has_seed = false;  // and its seed (its data order), where the marker records it
  uint64_t seed = 0;
  std::string from;  // checkpoint model file resumed from ("" when fresh)
  std::string state_path;  // and its state file
  TrainState state;  // its fields; the moments stay in the file until the model exists
  std::string schedule_changes;  // how its run's schedule differs from this run's ("" when not)
};

bool resolve_resume(const TrainConfig& c, Start* s, std::string* error) {
  s->run_id = new_run_id();
  if (c.resume.empty()) return true;
  std::string dir = c.output_dir, model_path;
  int step = -1;
  if (c.resume == "auto" || is_directory(c.resume)) {
    if (c.resume != "auto") dir = c.resume;
    const ResumeChoice r = choose_resume(dir);
    step = r.step;
    if (step < 0 && r.newest_any >= 0) {  // another run's complete checkpoints only: which to continue is the user's
      *error = "--resume " + c.resume + ": the run that last wrote " + join_path(dir, "manifest.json") + " (run_id " +
               r.run_id + ", step " + std::to_string(r.manifest_step) + ") left no complete checkpoint, and " +
               join_path(dir, model_file_name(r.newest_any)) +
               " is another run's: name it with --resume to continue that run, or leave --resume out to start afresh";
      return false;
    }
    if (step < 0 && c.resume == "auto") return true;  // nothing to resume: start fresh
    if (step < 0) {
      *error = "--resume " + c.resume + ": no complete checkpoint (model, state and DONE marker) in that directory";
      return false;
    }
  } else {
    dir = dir_name(c.resume);
    int parsed = -1;
    char tail = 0;
    std::string base = c.resume.substr(c.resume.find_last_of('/') + 1);
    if (std::sscanf(base.c_str(), "model_%8d.bin%c", &parsed, &tail) != 1) {
      *error = "--resume " + c.resume + ": expected auto, a checkpoint directory or a model_%08d.bin file";
      return false;
    }
    if (!path_exists(c.resume)) {
      *error = "--resume " + c.resume + ": no such file";
      return false;
    }
    if (!path_exists(join_path(dir, done_file_name(parsed)))) {
      *error = "--resume " + c.resume + ": checkpoint is incomplete (no " + done_file_name(parsed) + " beside it)";
      return false;
    }
    step = parsed;
  }
  model_path = join_path(dir, model_file_name(step));
  GPTConfig g;
  int version = 0;
  if (!read_model_header(model_path, &g, &version, error)) return false;
  if (g.max_seq_len != c.model.max_seq_len || g.vocab_size != c.model.vocab_size ||
      g.padded_vocab_size != c.model.padded_vocab_size || g.num_layers != c.model.num_layers ||
      g.num_heads != c.model.num_heads || g.channels != c.model.channels) {
    *error = model_path + ": checkpoint geometry " + geometry_json(g).dump() + " does not match the run's " +
             geometry_json(c.model).dump();
    return false;
  }
  if (step > c.max_steps) {
    *error = model_path + ": its step " + std::to_string(step) + " is past --max-steps " +
             std::to_string(c.max_steps) + " (raise --max-steps to train on from it)";
    return false;
  }
  if (!read_state_header(join_path(dir, state_file_name(step)), &s->state, error)) return false;
  if (s->state.num_parameters != num_parameters(g) || s->state.step != step) {
    *error = join_path(dir, state_file_name(step)) + ": does not belong to " + model_path;
    return false;
  }
  s->step = step;
  const Marker marker = read_marker(dir, step);
  if (!marker.run_id.empty()) s->run_id = marker.run_id;  // else: from before run ids
  s->shards = marker.shards;
  s->has_seed = marker.has_seed;
  s->seed = marker.seed;
  s->schedule_changes = schedule_differences(marker.training, c);
  s->from = model_path;
  s->state_path = join_path(dir, state_file_name(step));
  return true;
}

// What a run's training shards are, however they were named (a folder, its one file, a link,
// a copy): "name:tokens" of each, sorted by name, joined by commas. The checkpoint's data
// position is a place in these.
std::string shard_list(const std::vector<data::TokenShard>& shards) {
  std::vector<std::string> items;
  for (const data::TokenShard& s : shards)
    items.push_back(s.path.substr(s.path.find_last_of('/') + 1) + ":" + std::to_string(s.num_tokens));
  std::sort(items.begin(), items.end());
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// A checkpoint's tensors streamed straight between the files and the model's memory.
FloatSource from_model(GPT& model, GPT::Stored which) {
  return [&model, which](size_t offset, size_t count, float* dst, std::string* error) {
    return model.download(which, offset, count, dst, error);
  };
}
FloatSink into_model(GPT& model, GPT::Stored which) {
  return [&model, which](size_t offset, size_t count, const float* src, std::string* error) {
    return model.upload(which, offset, count, src, error);
  };
}

bool save_checkpoint(const TrainConfig& c, GPT& model, int step, const std::string& run_id, const Rng& rng,
                     const data::TokenBatchSampler& sampler, std::string* model_path, std::string* error) {
  if (!make_dirs(c.output_dir, error)) return false;
  TrainState st;
  st.step = step;
  st.rng_state = rng.state();
  auto pos = sampler.position();
  st.data_epoch = pos.epoch;
  st.data_shard = pos.shard;
  st.data_offset = pos.offset;
  st.num_parameters = model.num_parameters();
  *model_path = join_path(c.output_dir, model_file_name(step));
  // A bf16 model file rounds the master weights: the state keeps them whole, so a resume is
  // the run it continues, bit for bit.
  const bool bf16_file = c.checkpoint_version == 5;
  const FloatSource master = from_model(model, GPT::Stored::kMaster);
  // The marker is the checkpoint's manifest; manifest.json, the newest checkpoint's copy.
  const std::string manifest =
      manifest_json(c, model_file_name(step), step, model.num_parameters(), run_id, shard_list(sampler.shards()))
          .dump(2) +
      "\n";
  // DONE is written last: a crash before it leaves a checkpoint that resume ignores. One
  // left from an earlier run's checkpoint of this step goes first, or a failure half way
  // through would leave this run's model beside that run's state, marked complete.
  return remove_file(join_path(c.output_dir, done_file_name(step)), error) &&
         write_model_file(*model_path, model.config(), master, c.checkpoint_version, error) &&
         write_state_file(join_path(c.output_dir, state_file_name(step)), st,
                          from_model(model, GPT::Stored::kFirstMoment), from_model(model, GPT::Stored::kSecondMoment),
                          error, bf16_file ? &master : nullptr) &&
         write_file_atomic(join_path(c.output_dir, "manifest.json"), manifest, error) &&
         write_file_atomic(join_path(c.output_dir, done_file_name(step)), manifest, error);
}

// Mean loss over the first `batches` validation batches (fewer if the split is smaller).
bool validate(GPT& model, data::TokenBatchSampler& val, int batches, int B, int T, float* loss,
              std::string* error) {
  if (!val.seek({}, error)) return false;
  int n = static_cast<int>(std::min<int64_t>(batches, val.batches_per_epoch()));
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  if (!model.zero_loss(error)) return false;
  for (int i = 0; i < n; ++i) {
    if (!val.next(in.data(), tg.data(), error) || !model.upload_tokens(in.data(), tg.data(), B, T, error) ||
        !model.step_forward_backward(false, 0.f, error))
      return false;
  }
  float sum = 0, unused = 0;
  if (!model.read_scalars(&sum, &unused, error)) return false;
  *loss = sum / static_cast<float>(static_cast<int64_t>(n) * B * T);
  return true;
}

// A sample from the trained weights through the KV-cached engine (f32, on the same backend),
// starting from the document separator and drawing at temperature 1.
bool sample(GPT& model, const TrainConfig& c, const nfn_op_table* ops, nfn_ctx* ctx, Rng& rng,
            std::vector<int>* out, std::string* error) {
  std::vector<float> params;
  GPTDecoder decoder;
  if (!model.get_parameters(&params, error) || !decoder.init(ops, ctx, c.model, params, error)) return false;
  SamplingConfig sampling;
  sampling.seed = rng.next_u64();
  GenerationResult result;
  const int new_tokens = std::min(c.sample_tokens, c.model.max_seq_len - 1);
  if (!generate(&decoder, {c.eot_token}, new_tokens, sampling, -1, nullptr, &result, error)) return false;
  out->assign(result.tokens.begin(), result.tokens.end());
  return true;
}

// The op library the run uses, configured by its flags: the backend options, the CPU's GEMM
// mode, the storage dtype, whether the step records graphs, and whether attention runs at the
// model's geometry. Also what --check checks, so that `nfn train` learns of a bad flag before
// it prepares any data. false with the message and the exit code: 2 for a flag or geometry
// the library refuses, 1 where it cannot load.
struct RunSetup {
  std::string matmul;  // the CPU's GEMM mode ("" on CUDA)
  std::string dtype_name;
  nfn_dtype dtype = NFN_F32;
  bool graphs = false;
};

// Backend options (flag, the library's key, the value given), each passed to the op library
// as is: it refuses what it does not have.
std::vector<std::tuple<const char*, const char*, const std::string*>> backend_options(const TrainConfig& c) {
  return {{"threads", "threads", &c.threads},          {"matmul", "matmul", &c.matmul},
          {"attention", "attention", &c.attention},    {"gemm-tune", "gemm_tune", &c.gemm_tune},
          {"deterministic", "deterministic", &c.deterministic}, {"overlap", "overlap", &c.overlap},
          {"pdl", "pdl", &c.pdl}};
}

// Whether the library runs attention at the model's geometry (the CUDA library's kernels
// cover head sizes up to 128, and B*NH up to 65535), asked of the library itself
// with one position of each row of a micro-batch, so that a run (and --check, before `nfn
// train` prepares data) learns at once what its first step would. false with the message and
// the exit code: 2 where attention refuses the geometry, 1 where the probe itself fails.
bool attention_runs(const TrainConfig& c, Backend* backend, const RunSetup& setup, int* code, std::string* error) {
  const nfn_op_table& ops = backend->lib.ops;
  const int B = c.batch_size, C = c.model.channels, NH = c.model.num_heads;
  const size_t elem = setup.dtype == NFN_BF16 ? 2 : 4, qkv_count = 3 * static_cast<size_t>(B) * C;
  void *qkv = nullptr, *out = nullptr, *lse = nullptr;
  *code = 1;
  bool ok = ops.alloc(backend->ctx, qkv_count * elem, &qkv) == NFN_OK &&
            ops.alloc(backend->ctx, static_cast<size_t>(B) * C * elem, &out) == NFN_OK &&
            ops.alloc(backend->ctx, static_cast<size_t>(B) * NH * sizeof(float), &lse) == NFN_OK &&
            ops.fill(backend->ctx, qkv, setup.dtype, 0.0f, qkv_count) == NFN_OK;
  if (ok && ops.attention_forward(backend->ctx, out, static_cast<float*>(lse), qkv, B, 1, C, NH, setup.dtype) !=
                NFN_OK) {
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
  // up if the first recording fails.
  if (c.graphs != "off") {
    setup->graphs = StepGraph::supported(ops, backend->ctx, error);
    if (!setup->graphs && c.graphs == "on") {
      *error = "--graphs on: " + *error;
      return false;
    }
    error->clear();
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

}  // namespace

int run_training(const TrainConfig& c) {
  std::string error;
  if (c.check_only) {
    // Everything a run checks before it reads data: the checkpoint to resume, the output
    // directory, and the op library with the flags given to it.
    Start start;
    Backend backend;
    RunSetup setup;
    int code = 1;
    if (!resolve_resume(c, &start, &error) || !output_dir_writable(c.output_dir, &error)) return fail(error);
    if (!setup_backend(c, &backend, &setup, &code, &error)) return fail(error, code);
    return 0;
  }
  if (c.dry_run) {
    Json plan = plan_json(c);
    Json lib = Json::object();
    lib.set("backend", c.backend);
    lib.set("path", !c.tile_ops_lib.empty() ? c.tile_ops_lib
                                           : find_op_library(c.backend == "cuda" ? "cuda" : "cpu"));
    if (c.backend == "auto") lib.set("cuda_path", find_op_library("cuda"));
    plan.set("op_library", lib);
    std::printf("%s\n", plan.dump(2).c_str());
    return 0;
  }
  const auto t_start = Clock::now();
  const int B = c.batch_size, T = c.seq_len;

  // Data first: the cheapest place to find a bad path.
  if (c.train_data.empty()) return fail("--train-data is required (a shard directory or a *_train_*.bin file)");
  std::vector<data::TokenShard> train_shards, val_shards;
  if (!data::find_shards(c.train_data, "train", &train_shards, &error)) return fail(error);
  if (!c.val_data.empty()) {
    if (!data::find_shards(c.val_data, "val", &val_shards, &error)) return fail(error);
  } else if (is_directory(c.train_data)) {
    std::string ignored;
    data::find_shards(c.train_data, "val", &val_shards, &ignored);  // optional
  } else {
    std::string ignored;
    data::find_validation_siblings(c.train_data, &val_shards, &ignored);
  }
  data::TokenBatchSampler train, val;
  if (!train.open(train_shards, B, T, c.seed, &error)) return fail(error);
  train.set_vocab_size(c.model.vocab_size);
  const bool have_val = !val_shards.empty() && c.eval_batches > 0;
  if (have_val) {
    if (!val.open(val_shards, B, T, 0, &error)) return fail(error);
    val.set_vocab_size(c.model.vocab_size);
  }

  // One run writes a directory at a time: two at once left checkpoints marked complete whose
  // files came from both.
  if (!lock_directory(c.output_dir, &error)) return fail(error);
  Start start;
  if (!resolve_resume(c, &start, &error)) return fail(error);
  if (int n = remove_orphaned_temp_files(c.output_dir))
    std::fprintf(stderr, "nfn: removed %d unfinished file%s in %s that a killed run was writing\n", n,
                 n == 1 ? "" : "s", c.output_dir.c_str());

  Backend backend;
  RunSetup setup;
  if (int code = 1; !setup_backend(c, &backend, &setup, &code, &error)) return fail(error, code);
  const nfn_op_table& ops = backend.lib.ops;
  const std::string& matmul = setup.matmul;
  const std::string& dtype_name = setup.dtype_name;
  const nfn_dtype dtype = setup.dtype;
  bool graphs = setup.graphs;
  std::string graphs_note;  // why graphs were given up, when they were
  GPT model;
  if (!model.init(&ops, backend.ctx, c.model, dtype, &error, B, T)) return fail(error);
  StepGraph step_graph(&ops, backend.ctx);
  Rng rng(c.seed ^ 0x6e666e5f67707400ull);
  if (!start.from.empty()) {
    rng.set_state(start.state.rng_state);
    data::TokenBatchSampler::Position pos{start.state.data_epoch, start.state.data_shard, start.state.data_offset};
    // A checkpoint's data position is a place in its own run's shards: on other shards the run
    // reads them from the start (the weights, moments and schedule go on).
    // The same holds for another --seed: the position is a place in the seed's shard order.
    const std::string shards = shard_list(train.shards());
    const bool other_shards = !start.shards.empty() && start.shards != shards;
    const int64_t n = static_cast<int64_t>(train.shards().size());
    const bool other_order = start.has_seed && data::shard_order(n, start.seed, pos.epoch) !=
                                                   data::shard_order(n, c.seed, pos.epoch);
    if (other_shards)
      std::fprintf(stderr, "nfn: resuming on other data (%s: shards %s; the checkpoint's run read %s): reading it "
                   "from the start\n", c.train_data.c_str(), shards.c_str(), start.shards.c_str());
    else if (other_order)
      std::fprintf(stderr, "nfn: resuming with --seed %llu, another shard order than the checkpoint's run's (seed "
                   "%llu): reading the data from the start\n", static_cast<unsigned long long>(c.seed),
                   static_cast<unsigned long long>(start.seed));
    const bool other_data = other_shards || other_order;
    // Told, not refused: a longer run (max_steps) or a new learning rate is a user's choice,
    // and a template's recipe may have changed since the checkpoint's run began.
    if (!start.schedule_changes.empty())
      std::fprintf(stderr, "nfn: resuming %s, whose run had another schedule: %s (this run's, from its flags or "
                   "its template's recipe, applies from here)\n", start.from.c_str(), start.schedule_changes.c_str());
    GPTConfig g;
    if (!read_model_file(start.from, &g, into_model(model, GPT::Stored::kMaster), &error) ||
        !read_state_moments(start.state_path, start.state, into_model(model, GPT::Stored::kFirstMoment),
                            into_model(model, GPT::Stored::kSecondMoment), &error) ||
        (start.state.has_master &&
         !read_state_master(start.state_path, start.state, into_model(model, GPT::Stored::kMaster), &error)))
      return fail(error);
    if (!other_data && !train.seek(pos, &error)) return fail(start.state_path + ": " + error);
  } else if (!c.weights.empty()) {
    GPTConfig g;
    int version = 0;
    if (!read_model_header(c.weights, &g, &version, &error)) return fail(error);
    if (num_parameters(g) != model.num_parameters() || g.num_layers != c.model.num_layers ||
        g.num_heads != c.model.num_heads || g.channels != c.model.channels || g.vocab_size != c.model.vocab_size ||
        g.max_seq_len != c.model.max_seq_len || g.padded_vocab_size != c.model.padded_vocab_size)
      return fail(c.weights + ": weights geometry " + geometry_json(g).dump() + " does not match the model's " +
                  geometry_json(c.model).dump());
    if (!read_model_file(c.weights, &g, into_model(model, GPT::Stored::kMaster), &error)) return fail(error);
  } else if (!model.set_parameters(GPT::random_parameters(c.model, c.seed), &error)) {
    return fail(error);
  }

  // The CUDA library names its device outside the ABI; on a GPU of known peak, bf16 runs
  // report their MFU.
  std::string device;
  using DeviceName = const char* (*)(const nfn_ctx*);
  if (auto name = reinterpret_cast<DeviceName>(dlsym(backend.lib.handle, "nfn_cuda_device_name")))
    device = name(backend.ctx);
  const double peak_flops = dtype == NFN_BF16 ? bf16_peak_tflops(device) * 1e12 : 0;
  const double token_flops = flops_per_token(model.num_parameters(), c.model.num_layers, T, c.model.channels);

  const bool tty = isatty(fileno(stderr));
  const std::string gemms = matmul.empty() ? "" : " with " + matmul + " GEMMs";
  std::fprintf(stderr, "nfn: %s %s, %zu parameters, %s%s on %s (%s), %.1f GiB for the model and micro-batch %d x %d%s%s\n",
               c.model_family.c_str(), c.template_name.c_str(), model.num_parameters(), dtype_name.c_str(),
               gemms.c_str(), backend.name.c_str(), backend.path.c_str(),
               static_cast<double>(GPT::memory_bytes(c.model, dtype, B, T)) / (1 << 30), B, T,
               start.from.empty() ? "" : ", resuming from ", start.from.c_str());

  Phases ph;
  Json train_losses = Json::array(), val_losses = Json::array(), step_seconds = Json::array();
  // Host time to issue each step's work. The host never waits inside a step: on CUDA a step
  // whose enqueue time nears its step time is bound by launch overhead, the case CUDA graphs
  // would help; on the CPU the ops run as they are issued, so it is the step.
  Json enqueue_seconds = Json::array();
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  const float grad_scale = 1.0f / static_cast<float>(c.train_batch_tokens);
  auto forward_backward = [&](std::string* why) { return model.step_forward_backward(true, grad_scale, why); };
  double train_time = 0;
  int64_t trained_tokens = 0;
  float last_loss = NAN, final_val = NAN;
  std::string model_path;
  const bool u16 = train.token_bytes() == 2;
  // uint16 windows go up from page-locked memory, one buffer per micro-step and two sets,
  // alternating by step: an upload is only queued, and a set is written again only after
  // the step that used it is known to be done (its scalars were read).
  HostBuffers windows(ops, backend.ctx);
  const size_t window_bytes = (static_cast<size_t>(B) * T + 1) * 2;
  if (u16 && !windows.alloc(2 * c.grad_accum_steps, window_bytes, "page-locked token buffers", &error))
    return fail(error);
  StepReadback readback(ops, backend.ctx);
  if (!readback.init(&error)) return fail(error);
  TrainLog log;  // left as it is by a resumed run with nothing to train (it logs nothing)
  if (start.step < c.max_steps && !log.open(c.output_dir, start.step, &error)) return fail(error);

  // Validates, times it, records [step, loss], prints a line and logs it (unless a resumed
  // run that had nothing left to train already logged it).
  auto run_validation = [&](int step, float* loss, bool logged = true) {
    const auto t = Clock::now();
    if (!validate(model, val, c.eval_batches, B, T, loss, &error)) return false;
    ph.validation += seconds_since(t);
    Json& r = val_losses.push(Json::array());
    r.push(step);
    r.push(static_cast<double>(*loss));
    std::fprintf(stderr, "step %5d/%d | validation loss %.4f\n", step, c.max_steps, *loss);
    return !logged || log.validation(step, *loss, &error);
  };

  // A step whose ops are issued and whose scalars are not yet read.
  struct Issued {
    int step;
    float lr;
    Clock::time_point start;
  };
  // Reads an issued step's loss and gradient norm (waiting if they are not there yet),
  // records and prints them. Returns the exit code to stop with, or 0. A step's time runs
  // from its start to the next step's start (`next_start`) when the host went on to issue
  // that one first, so over a run the steps add up to the loop's time whichever side, host
  // or device, was the slower; a step read before the next started (checkpoints,
  // validation, the end, or a backend that is already done) runs to when it was read.
  auto finish = [&](const Issued& s, const Clock::time_point* next_start) {
    auto t0 = Clock::now();
    float loss_sum = 0, sumsq = 0;
    if (!readback.wait(s.step, &loss_sum, &sumsq, &error)) return fail(error);
    const auto now = Clock::now();
    ph.wait += std::chrono::duration<double>(now - t0).count();
    const double dt = std::chrono::duration<double>((next_start != nullptr ? *next_start : now) - s.start).count();
    train_time += dt;
    step_seconds.push(dt);
    trained_tokens += c.train_batch_tokens;
    last_loss = loss_sum / static_cast<float>(c.train_batch_tokens);
    const int done = s.step + 1;
    if (!std::isfinite(last_loss) || !std::isfinite(sumsq)) {
      // The last checkpoint this run wrote, else the one it resumed from.
      const std::string& last_good = !model_path.empty() ? model_path : start.from;
      return std::fprintf(stderr,
                          "nfn_gpt_native_train: error: step %d: loss is %s; stopping without writing a "
                          "checkpoint (last good: %s)\n",
                          done, std::isnan(last_loss) ? "NaN" : "infinite",
                          last_good.empty() ? "none" : last_good.c_str()),
             3;
    }
    Json& row = train_losses.push(Json::array());
    row.push(done);
    row.push(static_cast<double>(last_loss));
    const double tokens_per_s = c.train_batch_tokens / dt;
    if (!log.train(done, last_loss, s.lr, std::sqrt(sumsq), dt, tokens_per_s, &error)) return fail(error);
    if (tty || done == c.max_steps || done % std::max(1, c.max_steps / 10) == 0) {
      char mfu[32] = "";
      if (peak_flops > 0) std::snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * token_flops * tokens_per_s / peak_flops);
      std::fprintf(stderr, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s\n", done,
                   c.max_steps, last_loss, s.lr, std::sqrt(sumsq), 1e3 * dt, tokens_per_s, mfu);
    }
    return 0;
  };

  std::optional<Issued> pending;
  for (int step = start.step; step < c.max_steps; ++step) {
    const auto t_step = Clock::now();
    if (!model.zero_grads(&error) || !model.zero_loss(&error)) return fail(error);
    for (int micro = 0; micro < c.grad_accum_steps; ++micro) {
      auto t0 = Clock::now();
      if (!train.next(in.data(), tg.data(), &error)) return fail(error);
      bool up = false;
      if (u16) {
        void* window = windows[(step & 1) * c.grad_accum_steps + micro];
        std::memcpy(window, train.last_window().data(), window_bytes);
        up = model.upload_window_u16(static_cast<const uint16_t*>(window), B, T, &error);
      } else {
        up = model.upload_tokens(in.data(), tg.data(), B, T, &error);
      }
      if (!up) return fail(error);
      ph.data += seconds_since(t0);
      t0 = Clock::now();
      // With graphs, the first step runs op by op (first-use setup cannot be recorded); later
      // micro-steps replay its recording. A recording runs nothing, so where auto's first
      // one fails, the micro-step is issued op by op, as is the rest of the run.
      bool ok = graphs && step > start.step ? step_graph.run(model.activations_version(), forward_backward, &error)
                                            : forward_backward(&error);
      // Only a failed recording (a later step's) turns graphs off: a failure of the first
      // step, which runs op by op anyway, is the op's own and ends the run.
      if (!ok && graphs && step > start.step && c.graphs == "auto" && step_graph.recordings() == 0) {
        graphs = false;
        graphs_note = "graphs off: " + error;
        std::fprintf(stderr, "nfn: %s; going on op by op\n", graphs_note.c_str());
        ok = forward_backward(&error);
      }
      if (!ok) return fail(error);
      ph.forward_backward += seconds_since(t0);
    }
    auto t0 = Clock::now();
    const float lr = learning_rate_at(step, c.max_steps, c.warmup_steps, static_cast<float>(c.learning_rate),
                                      static_cast<float>(c.final_lr_fraction));
    if (!model.optimizer_step(step + 1, lr, static_cast<float>(c.beta1), static_cast<float>(c.beta2),
                              static_cast<float>(c.eps), static_cast<float>(c.weight_decay),
                              static_cast<float>(c.max_grad_norm), &error) ||
        !readback.queue(model, step, &error))
      return fail(error);
    ph.optimizer += seconds_since(t0);
    enqueue_seconds.push(seconds_since(t_step));
    // This step's ops are queued behind the last one's: read that one now.
    if (pending) {
      if (int rc = finish(*pending, &t_step)) return rc;
      pending.reset();
    }
    const Issued issued{step, lr, t_step};
    const int done = step + 1;
    const bool checkpoint_now = c.checkpoint_every > 0 && done % c.checkpoint_every == 0 && done < c.max_steps;
    const bool validate_now = have_val && c.eval_every_steps > 0 && done % c.eval_every_steps == 0 &&
                              done < c.max_steps;
    bool ready = false;
    if (!readback.ready(step, &ready, &error)) return fail(error);
    if (ready || checkpoint_now || validate_now || done == c.max_steps) {
      if (int rc = finish(issued, nullptr)) return rc;
    } else {
      pending = issued;
    }
    if (checkpoint_now) {
      t0 = Clock::now();
      if (!save_checkpoint(c, model, done, start.run_id, rng, train, &model_path, &error)) return fail(error);
      ph.checkpoint += seconds_since(t0);
    }
    if (validate_now) {
      float loss;
      if (!run_validation(done, &loss)) return fail(error);
    }
  }

  // The artifact first: a failing validation must not cost the finished training.
  auto t0 = Clock::now();
  // A resumed run with nothing left to train (its checkpoint is at --max-steps) keeps that
  // checkpoint and its log as they are.
  const int final_step = c.max_steps;
  const bool trained = start.step < final_step;
  if (!trained)
    model_path = start.from;
  else if (!save_checkpoint(c, model, final_step, start.run_id, rng, train, &model_path, &error))
    return fail(error);
  ph.checkpoint += seconds_since(t0);
  if (have_val && !run_validation(final_step, &final_val, trained)) return fail(error);
  std::vector<int> samples;
  if (c.sample_tokens > 0 && !sample(model, c, &ops, backend.ctx, rng, &samples, &error)) return fail(error);

  Json report = Json::object();
  report.set("model_family", c.model_family);
  report.set("template", c.template_name);
  report.set("parameters", static_cast<uint64_t>(model.num_parameters()));
  report.set("geometry", geometry_json(c.model));
  report.set("config", plan_json(c));
  report.set("steps", c.max_steps);
  report.set("resumed_from", start.from.empty() ? Json() : Json(start.from));
  report.set("run_id", start.run_id);
  report.set("tokens_per_step", static_cast<int64_t>(c.train_batch_tokens));
  report.set("train_tokens", trained_tokens);
  report.set("train_tokens_per_second", train_time > 0 ? trained_tokens / train_time : 0.0);
  // Over the whole run (the first step's setup included), against the device's bf16 peak.
  report.set("mfu", peak_flops > 0 && train_time > 0
                        ? Json(token_flops * (trained_tokens / train_time) / peak_flops)
                        : Json());
  Json phases = Json::object();
  phases.set("data_s", ph.data);
  phases.set("forward_backward_s", ph.forward_backward);
  phases.set("optimizer_s", ph.optimizer);
  phases.set("wait_s", ph.wait);
  phases.set("validation_s", ph.validation);
  phases.set("checkpoint_s", ph.checkpoint);
  phases.set("total_s", seconds_since(t_start));
  report.set("phase_seconds", phases);
  report.set("train_losses", train_losses);
  report.set("step_seconds", step_seconds);
  report.set("enqueue_seconds", enqueue_seconds);
  report.set("final_train_loss", std::isfinite(last_loss) ? Json(static_cast<double>(last_loss)) : Json());
  report.set("validation_losses", val_losses);
  report.set("final_validation_loss", std::isfinite(final_val) ? Json(static_cast<double>(final_val)) : Json());
  Json lib = Json::object();
  lib.set("backend", backend.name);
  lib.set("path", backend.path);
  lib.set("dtype", dtype_name);
  if (!device.empty()) lib.set("device", device);
  if (!backend.auto_note.empty()) lib.set("note", backend.auto_note);
  lib.set("graphs", graphs);
  if (!graphs_note.empty()) lib.set("graphs_note", graphs_note);
  lib.set("graph_recordings", step_graph.recordings());
  Json configured = Json::object();  // the backend options given, by the library's keys
  for (const auto& [flag, key, value] : backend_options(c))
    if (!value->empty()) configured.set(key, *value);
  lib.set("options", configured);
  // The CUDA library names its attention kernel path (flash, thunderkittens) outside the ABI.
  using AttentionPath = const char* (*)(const nfn_ctx*);
  if (auto path = reinterpret_cast<AttentionPath>(dlsym(backend.lib.handle, "nfn_cuda_attention_path")))
    lib.set("attention", path(backend.ctx));
  // And how often its fused cuBLASLt epilogues ran fused (bf16), e.g. "dgelu 12/12 fused".
  using Epilogues = const char* (*)(nfn_ctx*);
  if (auto fused = reinterpret_cast<Epilogues>(dlsym(backend.lib.handle, "nfn_cuda_fused_epilogues")))
    lib.set("fused_epilogues", fused(backend.ctx));
  // And what gemm_tune did: shapes timed, and those taken from the picks file of a run before.
  if (auto tune = reinterpret_cast<Epilogues>(dlsym(backend.lib.handle, "nfn_cuda_gemm_tune")))
    lib.set("gemm_tune", tune(backend.ctx));
  if (!matmul.empty()) lib.set("matmul", matmul);
  report.set("op_library", lib);
  report.set("checkpoint_dir", c.output_dir);
  report.set("model_file", model_path);
  report.set("manifest_file", join_path(c.output_dir, "manifest.json"));
  report.set("log_file", join_path(c.output_dir, TrainLog::kFileName));
  const std::string report_path = join_path(c.output_dir, "report.json");
  report.set("report_file", report_path);
  Json sample_ids = Json::array();
  for (int id : samples) sample_ids.push(id);
  report.set("sample_tokens", sample_ids);
  if (!write_file_atomic(report_path, report.dump(2) + "\n", &error)) return fail(error);
  if (c.json) std::printf("%s\n", report.dump(2).c_str());
  else if (trained) std::fprintf(stderr, "nfn: wrote %s and %s\n", model_path.c_str(), report_path.c_str());
  else std::fprintf(stderr, "nfn: %s is at --max-steps already; wrote %s\n", model_path.c_str(), report_path.c_str());
  return 0;
}

}  // namespace nfn
