#include "cc/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "cc/data/best_fit.h"
#include "cc/data/masked_rows.h"
#include "cc/data/token_shards.h"
#include "cc/ops/host_buffers.h"
#include "cc/train/checkpointing.h"
#include "cc/train/family.h"
#include "cc/train/mfu.h"
#include "cc/train/resolve_decoder.h"
#include "cc/train/resume.h"
#include "cc/train/run_setup.h"
#include "cc/train/schedule.h"
#include "cc/train/stage_timing.h"
#include "cc/train/step_graph.h"
#include "cc/train/step_readback.h"
#include "cc/train/train_log.h"
#include "cc/util/files.h"
#include "cc/util/rng.h"

namespace nfn {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The binary running this loop (nfn_gpt_native_train, nfn_nanochat_native_train, ...), as its
// messages name it.
std::string trainer_binary_name() {
  const std::string exe = executable_path(), name = exe.substr(exe.find_last_of('/') + 1);
  return name.empty() ? "nfn_native_train" : name;
}

// One line on stderr; the exit code: 1, or 2 for a bad flag.
int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "%s: error: %s\n", trainer_binary_name().c_str(), message.c_str());
  return code;
}

int print_plan(const TrainConfig& c) {
  Json plan = plan_json(c);
  Json lib = Json::object();
  lib.set("backend", c.backend);
  lib.set("path", !c.tile_ops_lib.empty() ? c.tile_ops_lib : find_op_library(c.backend == "cuda" ? "cuda" : "cpu"));
  if (c.backend == "auto") lib.set("cuda_path", find_op_library("cuda"));
  plan.set("op_library", lib);
  plan.set("resume_checkpoint", resume_choice_json(c));
  std::printf("%s\n", plan.dump(2).c_str());
  return 0;
}

// The shards a run reads: --train-data's, and --val-data's or the train shards' val siblings,
// both token shards cut into rows as --packing says, or masked rows (nfn sft's) as they are.
struct RunData {
  std::unique_ptr<data::BatchSampler> train, val;
  data::TokenBatchSampler* contiguous = nullptr;  // train, where contiguous: its windows go up as uint16
  data::BestFitSampler* best_fit = nullptr;       // train, where best fit: a resume restores its buffer
  data::MaskedRowSampler* masked = nullptr;       // train, where masked rows: targets -1 where not learned
  bool have_val = false;
  // Rows that go up as int32 inputs and targets (best fit, masked rows), not uint16 windows.
  bool int32_rows() const { return best_fit != nullptr || masked != nullptr; }
};

// A sampler of `shards` as c.packing says: contiguous windows, or best-fit rows (BOS c.eot_token).
std::unique_ptr<data::BatchSampler> open_sampler(const TrainConfig& c, std::vector<data::TokenShard> shards, int B,
                                                 uint64_t seed, std::string* error) {
  std::unique_ptr<data::BatchSampler> out;
  bool ok;
  if (c.packing == "bestfit") {
    auto fit = std::make_unique<data::BestFitSampler>();
    ok = fit->open(std::move(shards), B, c.seq_len, seed, c.eot_token, c.packing_buffer, error);
    out = std::move(fit);
  } else {
    auto windows = std::make_unique<data::TokenBatchSampler>();
    ok = windows->open(std::move(shards), B, c.seq_len, seed, error);
    out = std::move(windows);
  }
  if (!ok) return nullptr;
  out->set_vocab_size(c.model.vocab_size);
  return out;
}

// Masked-row shards (nfn sft's): training reads the rows in order, epoch after epoch;
// validation reads each row of its split once, its last batch filled up with rows that train
// nothing. The validation files are --val-data's, else the train files' val siblings.
bool open_masked_rows(const TrainConfig& c, RunData* d, std::string* error) {
  if (c.packing != "contiguous") {
    *error = "--packing " + c.packing + ": " + c.train_data + " holds masked rows, packed already (nfn sft packs "
             "conversations into them by best fit)";
    return false;
  }
  std::vector<data::MaskedRowShard> train, val;
  std::vector<std::string> val_paths;
  std::string ignored;  // the validation split is optional unless named
  if (!data::find_masked_row_shards(c.train_data, "train", &train, error)) return false;
  if (!c.val_data.empty()) {
    if (!data::find_masked_row_shards(c.val_data, "val", &val, error)) return false;
  } else if (is_directory(c.train_data) ? data::list_shard_files(c.train_data, "val", &val_paths, &ignored)
                                        : data::validation_sibling_files(c.train_data, &val_paths, &ignored)) {
    if (!data::read_masked_row_headers(val_paths, &val, error)) return false;
  }
  auto rows = std::make_unique<data::MaskedRowSampler>();
  if (!rows->open(std::move(train), c.batch_size, c.seq_len, c.seed, /*pad_epoch_end=*/false, error)) return false;
  rows->set_vocab_size(c.model.vocab_size);
  d->masked = rows.get();
  d->train = std::move(rows);
  d->have_val = !val.empty() && c.eval_batches > 0;
  if (!d->have_val) return true;
  auto val_rows = std::make_unique<data::MaskedRowSampler>();
  if (!val_rows->open(std::move(val), c.eval_batch_size, c.seq_len, 0, /*pad_epoch_end=*/true, error)) return false;
  val_rows->set_vocab_size(c.model.vocab_size);
  d->val = std::move(val_rows);
  return true;
}

bool open_data(const TrainConfig& c, RunData* d, std::string* error) {
  if (c.train_data.empty()) {
    *error = "--train-data is required (a shard directory or a *_train_*.bin file)";
    return false;
  }
  // The files' first word says which: masked rows, else token shards (whose reader names both
  // formats when a file is neither).
  std::vector<std::string> files;
  if (!data::list_shard_files(c.train_data, "train", &files, error)) return false;
  if (data::is_masked_row_file(files[0])) return open_masked_rows(c, d, error);
  std::vector<data::TokenShard> train_shards, val_shards;
  if (!data::find_shards(c.train_data, "train", &train_shards, error)) return false;
  std::string ignored;  // the validation split is optional unless named
  if (!c.val_data.empty()) {
    if (!data::find_shards(c.val_data, "val", &val_shards, error)) return false;
  } else if (is_directory(c.train_data)) {
    data::find_shards(c.train_data, "val", &val_shards, &ignored);
  } else {
    data::find_validation_siblings(c.train_data, &val_shards, &ignored);
  }
  if (!(d->train = open_sampler(c, std::move(train_shards), c.batch_size, c.seed, error))) return false;
  d->contiguous = dynamic_cast<data::TokenBatchSampler*>(d->train.get());
  d->best_fit = dynamic_cast<data::BestFitSampler*>(d->train.get());
  d->have_val = !val_shards.empty() && c.eval_batches > 0;
  // Validation rows are cut as training's, from the split's start (seed 0: sorted order).
  return !d->have_val || (d->val = open_sampler(c, std::move(val_shards), c.eval_batch_size, 0, error)) != nullptr;
}

// Mean loss over the targets that count (masked rows: those the mask keeps; else all) of the
// first `batches` validation batches (fewer if the split is smaller).
bool validate(TrainableModel& model, data::BatchSampler& val, int batches, int B, int T, float* loss,
              std::string* error) {
  if (!val.seek({}, error)) return false;
  int n = static_cast<int>(std::min<int64_t>(batches, val.batches_per_epoch()));
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  if (!model.zero_loss(error)) return false;
  int64_t targets = 0;
  for (int i = 0; i < n; ++i) {
    if (!val.next(in.data(), tg.data(), error) || !model.upload_tokens(in.data(), tg.data(), B, T, error) ||
        !model.step_forward_backward(false, 0.f, error))
      return false;
    targets += std::count_if(tg.begin(), tg.end(), [](int32_t t) { return t >= 0; });
  }
  if (n > 0 && targets == 0) {
    *error = "validation: its rows hold no target to learn (every mask is 0)";
    return false;
  }
  float sum = 0, unused = 0;
  if (!model.read_scalars(&sum, &unused, error)) return false;
  *loss = sum / static_cast<float>(targets);
  return true;
}

// Tells why a resume reads its data from the start, and of a schedule changed since its run.
// The data position is a place in its own run's shards, in its seed's shard order: on other
// shards or another order the run reads the data from the start (the weights, moments and
// schedule go on). Returns whether the position applies.
bool resume_position_applies(const TrainConfig& c, const Start& start, const data::BatchSampler& train) {
  const std::string shards = shard_list(train.shards());
  const bool other_shards = !start.shards.empty() && !same_shards(start.shards, shards);
  const int64_t n = static_cast<int64_t>(train.shards().size());
  const int64_t epoch = start.state.data_epoch;
  const bool other_order =
      start.has_seed && data::shard_order(n, start.seed, epoch) != data::shard_order(n, c.seed, epoch);
  if (other_shards)
    std::fprintf(stderr, "nfn: resuming on other data (%s: shards %s; the checkpoint's run read %s): reading it "
                 "from the start\n", c.train_data.c_str(), shards.c_str(), start.shards.c_str());
  else if (other_order)
    std::fprintf(stderr, "nfn: resuming with --seed %llu, another shard order than the checkpoint's run's (seed "
                 "%llu): reading the data from the start\n", static_cast<unsigned long long>(c.seed),
                 static_cast<unsigned long long>(start.seed));
  // Told, not refused: a longer run (max_steps) or a new learning rate is a user's choice,
  // and a template's recipe may have changed since the checkpoint's run began.
  if (!start.schedule_changes.empty())
    std::fprintf(stderr, "nfn: resuming %s, whose run had another schedule: %s (this run's, from its flags or "
                 "its template's recipe, applies from here)\n", start.from.c_str(), start.schedule_changes.c_str());
  if (!other_shards && !other_order) tell_packing_changes(c, start);
  return !other_shards && !other_order;
}

struct Phases {
  double data = 0, forward_backward = 0, optimizer = 0, wait = 0, validation = 0, checkpoint = 0;
};

// A step whose ops are issued and whose scalars are not yet read.
struct Issued {
  int step;
  float lr;
  Clock::time_point start;
  int64_t targets;  // the targets its loss counts: every one, but in masked rows those learned
};

// One run: set up (data, the checkpoint to resume, the op library, the model), the steps,
// the final checkpoint, validation and sample, and the report. Each method returns the exit
// code to stop with, or 0.
class TrainingRun {
 public:
  explicit TrainingRun(const TrainConfig& c) : c_(c), B_(c.batch_size), T_(c.seq_len) {}

  int run() {
    t_start_ = Clock::now();
    int rc = setup();
    if (rc == 0) rc = restore();
    if (rc == 0) rc = train();
    if (rc == 0) rc = finish();
    return rc == 0 ? report() : rc;
  }

 private:
  int setup();
  int restore();
  int train();
  bool restore_data_position();
  int issue_step(int step, Clock::time_point t_step, float* lr, int64_t* targets);
  bool read_rows(size_t slot, int64_t* targets);
  bool upload_micro_batch(size_t slot);
  bool forward_backward(int step, float grad_scale);
  int finish_step(const Issued& s, const Clock::time_point* next_start);
  void mark_stage(Stage stage) {
    if (stage_timing_) stage_timing_->mark(stage);
  }
  bool run_validation(int step, float* loss, bool logged = true);
  int finish();
  int report();
  Json op_library_json() const;
  // The op library's block for the model and a micro-batch, and the activations' part of it.
  size_t memory_bytes() const { return family_->memory_bytes(setup_.dtype, B_, T_); }
  size_t activation_bytes() const { return memory_bytes() - family_->memory_bytes(setup_.dtype, 0, 0); }

  TrainConfig c_;  // the run's; its seed is the resumed run's where --seed is not given
  const int B_, T_;
  Clock::time_point t_start_;
  std::string error_;
  RunData data_;
  Start start_;
  Backend backend_;  // before everything that calls its ops, so it is destroyed after them
  RunSetup setup_;
  std::unique_ptr<ModelFamily> family_;
  std::unique_ptr<StepGraph> step_graph_;
  std::unique_ptr<StepReadback> readback_;
  std::unique_ptr<StageTiming> stage_timing_;  // --stage-timing, else null
  std::unique_ptr<HostBuffers> windows_;  // uint16 token windows, two sets (by step parity)
  size_t window_bytes_ = 0;
  Rng rng_{0};
  TrainLog log_;
  std::string graphs_note_;  // why graphs were given up, when they were
  double peak_flops_ = 0, token_flops_ = 0;
  std::string device_;

  Phases ph_;
  Json train_losses_ = Json::array(), val_losses_ = Json::array(), step_seconds_ = Json::array();
  // Host time to issue each step's work. The host never waits inside a step: on CUDA a step
  // whose enqueue time nears its step time is bound by launch overhead, the case CUDA graphs
  // would help; on the CPU the ops run as they are issued, so it is the step.
  Json enqueue_seconds_ = Json::array();
  std::vector<int32_t> in_, tg_;
  double train_time_ = 0;
  int64_t trained_tokens_ = 0;
  int64_t trained_targets_ = 0;  // the targets the losses counted (masked rows: those learned)
  float last_loss_ = NAN, final_val_ = NAN;
  std::string model_path_;
  bool trained_ = false;
  std::vector<int> samples_;
};

int TrainingRun::setup() {
  family_ = make_family(c_);
  // One run writes a directory at a time: two at once left checkpoints marked complete whose
  // files came from both.
  if (!lock_directory(c_.output_dir, &error_) || !resolve_resume(c_, *family_, &start_, &error_)) return fail(error_);
  keep_resumed_data_order(start_, &c_);
  if (!open_data(c_, &data_, &error_)) return fail(error_);
  if (int n = remove_orphaned_temp_files(c_.output_dir))
    std::fprintf(stderr, "nfn: removed %d unfinished file%s in %s that a killed run was writing\n", n,
                 n == 1 ? "" : "s", c_.output_dir.c_str());
  if (int code = 1; !setup_backend(c_, &backend_, &setup_, &code, &error_)) return fail(error_, code);
  const nfn_op_table& ops = backend_.lib.ops;
  if (!family_->create(&ops, backend_.ctx, setup_.dtype, B_, T_, &error_)) return fail(error_);
  step_graph_ = std::make_unique<StepGraph>(&ops, backend_.ctx);
  readback_ = std::make_unique<StepReadback>(ops, backend_.ctx);
  windows_ = std::make_unique<HostBuffers>(ops, backend_.ctx);
  // uint16 windows (best fit: int32 inputs and targets) go up from page-locked memory, one
  // buffer per micro-step and two sets, alternating by step: an upload is only queued, and a
  // set is written again only after the step that used it is known to be done (its scalars
  // were read).
  const size_t tokens = static_cast<size_t>(B_) * T_;
  window_bytes_ = data_.int32_rows() ? 2 * tokens * sizeof(int32_t) : (tokens + 1) * 2;
  if ((data_.int32_rows() || data_.train->token_bytes() == 2) &&
      !windows_->alloc(2 * c_.grad_accum_steps, window_bytes_, "page-locked token buffers", &error_))
    return fail(error_);
  if (!readback_->init(&error_)) return fail(error_);
  if (c_.stage_timing) {
    stage_timing_ = std::make_unique<StageTiming>(ops, backend_.ctx, c_.model.num_layers,
                                                  backend_.name == "cuda" ? "cuda events" : "host clock");
    family_->model().set_stage_timer(stage_timing_.get());
  }
  if (data_.masked != nullptr && setup_.graphs) {
    // Each step's gradients are scaled by 1 / its own count of learned targets, an argument a
    // recording would hold fixed.
    const std::string why = "masked rows scale each step's gradients by its own count of learned targets, which a "
                            "recording would hold fixed";
    if (c_.graphs == "on") return fail("--graphs on: " + why + " (leave --graphs auto or set it off)", 2);
    setup_.graphs = false;
    setup_.graphs_note = "graphs off: " + why;
  }
  graphs_note_ = setup_.graphs_note;
  // A resumed run with nothing to train leaves its log as it is (it logs nothing).
  if (start_.step < c_.max_steps && !log_.open(c_.output_dir, start_.step, &error_)) return fail(error_);
  in_.resize(static_cast<size_t>(B_) * T_);
  tg_.resize(in_.size());
  // On a GPU of known peak, bf16 runs report their MFU.
  library_report(backend_, "device", &device_);
  peak_flops_ = setup_.dtype == NFN_BF16 ? bf16_peak_tflops(device_) * 1e12 : 0;
  token_flops_ = family_->flops_per_token(T_);
  return 0;
}

// The training sampler where the checkpoint's run left it: the state file's data position,
// and where both runs pack best fit, the buffer its packing state file holds.
bool TrainingRun::restore_data_position() {
  const data::BatchSampler::Position pos{start_.state.data_epoch, start_.state.data_shard, start_.state.data_offset};
  std::string why;
  if (data_.best_fit == nullptr || start_.packing_path.empty()) {
    if (data_.train->seek(pos, &why)) return true;
    error_ = start_.state_path + ": " + why;
    return false;
  }
  if (start_.packing_state.bos != c_.eot_token) {
    error_ = start_.packing_path + ": BOS id " + std::to_string(start_.packing_state.bos) + ", but this run's "
             "--eot-token is " + std::to_string(c_.eot_token);
    return false;
  }
  if (data_.best_fit->restore(pos, start_.packing_state.buffered, &why)) return true;
  error_ = start_.packing_path + ": " + why;
  return false;
}

int TrainingRun::restore() {
  rng_ = Rng(c_.seed ^ 0x6e666e5f67707400ull);
  if (start_.from.empty()) {
    if (!family_->initialize(&error_) ||
        (!c_.init_state.empty() && !load_init_optimizer(c_.init_state, *family_, &c_.moment_steps, &error_)))
      return fail(error_);
  } else {
    c_.moment_steps = start_.moment_steps;
    rng_.set_state(start_.state.rng_state);
    const bool same_data = resume_position_applies(c_, start_, *data_.train);
    if (!load_checkpoint(start_, *family_, &error_)) return fail(error_);
    if (same_data && !restore_data_position()) return fail(error_);
  }
  const std::string gemms = setup_.matmul.empty() ? "" : " with " + setup_.matmul + " GEMMs";
  const char* timing = !c_.stage_timing           ? ""
                       : setup_.graphs_note.empty() ? ", --stage-timing"
                                                    : ", --stage-timing (graphs off)";
  std::string from = start_.from.empty() ? "" : ", resuming from " + start_.from;
  if (start_.from.empty() && !c_.init_from.empty())
    from = ", starting from " + c_.init_from +
           (c_.init_state.empty() ? "" : " and its optimizer moments (" + std::to_string(c_.moment_steps) + " steps)");
  std::fprintf(stderr, "nfn: %s %s, %zu parameters, %s%s on %s (%s), %.1f GiB for the model and micro-batch %d x %d "
               "(activations %.1f MiB, --recompute %s)%s%s\n",
               c_.model_family.c_str(), c_.template_name.c_str(), family_->num_parameters(),
               setup_.dtype_name.c_str(), gemms.c_str(), backend_.name.c_str(), backend_.path.c_str(),
               static_cast<double>(memory_bytes()) / (1 << 30), B_, T_,
               static_cast<double>(activation_bytes()) / (1 << 20), c_.recompute.c_str(), timing, from.c_str());
  return 0;
}

// Validates, times it, records [step, loss], prints a line and logs it (unless a resumed run
// that had nothing left to train already logged it).
bool TrainingRun::run_validation(int step, float* loss, bool logged) {
  const auto t = Clock::now();
  if (!validate(family_->model(), *data_.val, c_.eval_batches, c_.eval_batch_size, T_, loss, &error_)) return false;
  ph_.validation += seconds_since(t);
  Json& r = val_losses_.push(Json::array());
  r.push(step);
  r.push(static_cast<double>(*loss));
  std::fprintf(stderr, "step %5d/%d | validation loss %.4f\n", step, c_.max_steps, *loss);
  return !logged || log_.validation(step, *loss, &error_);
}

// One micro-step's forward and backward. With graphs, the first step runs op by op
// (first-use setup cannot be recorded); later micro-steps replay its recording. A recording
// runs nothing, so where auto's first one fails, the micro-step is issued op by op, as is the
// rest of the run. Only a failed recording (a later step's) turns graphs off: a failure of the
// first step, which runs op by op anyway, is the op's own and ends the run.
bool TrainingRun::forward_backward(int step, float grad_scale) {
  TrainableModel& model = family_->model();
  auto issue = [&](std::string* why) { return model.step_forward_backward(true, grad_scale, why); };
  const bool replay = setup_.graphs && step > start_.step;
  bool ok = replay ? step_graph_->run(model.activations_version(), issue, &error_) : issue(&error_);
  if (!ok && replay && c_.graphs == "auto" && step_graph_->recordings() == 0) {
    setup_.graphs = false;
    graphs_note_ = "graphs off: " + error_;
    std::fprintf(stderr, "nfn: %s; going on op by op\n", graphs_note_.c_str());
    ok = issue(&error_);
  }
  return ok;
}

// Reads the next micro-batch of int32 rows (best fit, masked rows) into page-locked buffer
// `slot`, inputs then targets, and adds the targets that count (>= 0) to *targets.
bool TrainingRun::read_rows(size_t slot, int64_t* targets) {
  int32_t* in = static_cast<int32_t*>((*windows_)[slot]);
  int32_t* tg = in + static_cast<size_t>(B_) * T_;
  if (!data_.train->next(in, tg, &error_)) return false;
  *targets += std::count_if(tg, tg + static_cast<size_t>(B_) * T_, [](int32_t t) { return t >= 0; });
  return true;
}

// Queues the upload of the next micro-batch: best-fit rows (read here) and masked rows (read
// before the step's first, by issue_step) as int32 inputs and targets and contiguous uint16
// windows as they are, all through page-locked buffer `slot`; uint32 windows from host vectors.
bool TrainingRun::upload_micro_batch(size_t slot) {
  TrainableModel& model = family_->model();
  if (data_.int32_rows()) {
    int64_t ignored = 0;
    int32_t* inputs = static_cast<int32_t*>((*windows_)[slot]);
    int32_t* targets = inputs + static_cast<size_t>(B_) * T_;
    return (data_.masked != nullptr || read_rows(slot, &ignored)) &&
           model.upload_tokens(inputs, targets, B_, T_, &error_);
  }
  if (!data_.train->next(in_.data(), tg_.data(), &error_)) return false;
  if (data_.train->token_bytes() != 2) return model.upload_tokens(in_.data(), tg_.data(), B_, T_, &error_);
  void* window = (*windows_)[slot];
  std::memcpy(window, data_.contiguous->last_window().data(), window_bytes_);
  return model.upload_window_u16(static_cast<const uint16_t*>(window), B_, T_, &error_);
}

// Issues a step's micro-batches and its optimizer step, and queues the read of its scalars.
// The loss is the mean over the step's targets that count, *targets of them: every one of
// token windows, the learned ones of masked rows, whose micro-batches are all read first to
// count them before the gradients are scaled by their inverse. With --stage-timing, the step's
// stages are marked as they are issued: the model marks its own; zeroing the gradients and the
// loss is the optimizer's, reading and uploading a batch the data's.
int TrainingRun::issue_step(int step, Clock::time_point t_step, float* lr, int64_t* targets) {
  TrainableModel& model = family_->model();
  if (stage_timing_ && !stage_timing_->begin_step(step, &error_)) return fail(error_);
  if (!model.zero_grads(&error_) || !model.zero_loss(&error_)) return fail(error_);
  mark_stage(Stage::kOptimizer);
  const size_t first_slot = static_cast<size_t>(step & 1) * c_.grad_accum_steps;
  *targets = c_.train_batch_tokens;
  if (data_.masked != nullptr) {
    const auto t0 = Clock::now();
    *targets = 0;
    for (int micro = 0; micro < c_.grad_accum_steps; ++micro)
      if (!read_rows(first_slot + micro, targets)) return fail(error_);
    ph_.data += seconds_since(t0);
  }
  // A step of masked rows that learns nothing (none is likely) has zero gradients either way.
  const float grad_scale = 1.0f / static_cast<float>(std::max<int64_t>(*targets, 1));
  for (int micro = 0; micro < c_.grad_accum_steps; ++micro) {
    auto t0 = Clock::now();
    if (!upload_micro_batch(first_slot + micro)) return fail(error_);
    mark_stage(Stage::kData);
    ph_.data += seconds_since(t0);
    t0 = Clock::now();
    if (!forward_backward(step, grad_scale)) return fail(error_);
    ph_.forward_backward += seconds_since(t0);
  }
  const auto t0 = Clock::now();
  *lr = scheduled_lr(c_, step);
  OptimizerStep opt{step + 1, *lr, static_cast<float>(c_.beta1), static_cast<float>(c_.beta2),
                    static_cast<float>(c_.eps), static_cast<float>(c_.weight_decay),
                    static_cast<float>(c_.max_grad_norm)};
  opt.lr_factor = c_.learning_rate > 0 ? *lr / static_cast<float>(c_.learning_rate) : 0.f;
  opt.moment_steps = c_.moment_steps;
  if (!model.optimizer_step(opt, &error_) || (stage_timing_ && !stage_timing_->end_step(&error_)) ||
      !readback_->queue(model, step, &error_))
    return fail(error_);
  ph_.optimizer += seconds_since(t0);
  enqueue_seconds_.push(seconds_since(t_step));
  return 0;
}

// Reads an issued step's loss and gradient norm (waiting if they are not there yet), records
// and prints them. A step's time runs from its start to the next step's start (`next_start`)
// when the host went on to issue that one first, so over a run the steps add up to the loop's
// time whichever side, host or device, was the slower; a step read before the next started
// (checkpoints, validation, the end, or a backend that is already done) runs to when it was read.
int TrainingRun::finish_step(const Issued& s, const Clock::time_point* next_start) {
  const auto t0 = Clock::now();
  float loss_sum = 0, sumsq = 0;
  if (!readback_->wait(s.step, &loss_sum, &sumsq, &error_)) return fail(error_);
  const auto now = Clock::now();
  ph_.wait += std::chrono::duration<double>(now - t0).count();
  const double dt = std::chrono::duration<double>((next_start != nullptr ? *next_start : now) - s.start).count();
  train_time_ += dt;
  step_seconds_.push(dt);
  if (stage_timing_ && !stage_timing_->collect(s.step, dt, &error_)) return fail(error_);
  trained_tokens_ += c_.train_batch_tokens;
  trained_targets_ += s.targets;
  last_loss_ = loss_sum / static_cast<float>(std::max<int64_t>(s.targets, 1));
  const int done = s.step + 1;
  if (!std::isfinite(last_loss_) || !std::isfinite(sumsq)) {
    // The last checkpoint this run wrote, else the one it resumed from.
    const std::string& last_good = !model_path_.empty() ? model_path_ : start_.from;
    std::fprintf(stderr, "%s: error: step %d: loss is %s; stopping without writing a checkpoint "
                 "(last good: %s)\n", trainer_binary_name().c_str(), done, std::isnan(last_loss_) ? "NaN" : "infinite",
                 last_good.empty() ? "none" : last_good.c_str());
    return 3;
  }
  Json& row = train_losses_.push(Json::array());
  row.push(done);
  row.push(static_cast<double>(last_loss_));
  const double tokens_per_s = c_.train_batch_tokens / dt;
  if (!log_.train(done, last_loss_, s.lr, std::sqrt(sumsq), dt, tokens_per_s, data_.masked ? s.targets : -1,
                  &error_))
    return fail(error_);
  if (isatty(fileno(stderr)) || done == c_.max_steps || done % std::max(1, c_.max_steps / 10) == 0) {
    char mfu[32] = "";
    if (peak_flops_ > 0)
      std::snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * token_flops_ * tokens_per_s / peak_flops_);
    std::fprintf(stderr, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s\n", done,
                 c_.max_steps, last_loss_, s.lr, std::sqrt(sumsq), 1e3 * dt, tokens_per_s, mfu);
  }
  return 0;
}

// The steps. Each step's ops are queued behind the last one's, whose scalars are read only
// then, so the host stays a step ahead of the device.
int TrainingRun::train() {
  std::optional<Issued> pending;
  for (int step = start_.step; step < c_.max_steps; ++step) {
    const auto t_step = Clock::now();
    float lr = 0;
    int64_t targets = 0;
    if (int rc = issue_step(step, t_step, &lr, &targets)) return rc;
    if (pending) {
      if (int rc = finish_step(*pending, &t_step)) return rc;
      pending.reset();
    }
    const Issued issued{step, lr, t_step, targets};
    const int done = step + 1;
    const bool checkpoint_now = c_.write_checkpoints && c_.checkpoint_every > 0 && done % c_.checkpoint_every == 0 &&
                                done < c_.max_steps;
    const bool validate_now =
        data_.have_val && c_.eval_every_steps > 0 && done % c_.eval_every_steps == 0 && done < c_.max_steps;
    bool ready = false;
    if (!readback_->ready(step, &ready, &error_)) return fail(error_);
    if (ready || checkpoint_now || validate_now || done == c_.max_steps) {
      if (int rc = finish_step(issued, nullptr)) return rc;
    } else {
      pending = issued;
    }
    if (checkpoint_now) {
      const auto t0 = Clock::now();
      if (!save_checkpoint(c_, *family_, done, start_.run_id, rng_, *data_.train, &model_path_, &error_))
        return fail(error_);
      ph_.checkpoint += seconds_since(t0);
    }
    float loss;
    if (validate_now && !run_validation(done, &loss)) return fail(error_);
  }
  return 0;
}

// The artifact first: a failing validation must not cost the finished training. A resumed
// run with nothing left to train (its checkpoint is at --max-steps) keeps that checkpoint
// and its log as they are.
int TrainingRun::finish() {
  const auto t0 = Clock::now();
  trained_ = start_.step < c_.max_steps;
  if (!trained_)
    model_path_ = start_.from;
  else if (c_.write_checkpoints &&
           !save_checkpoint(c_, *family_, c_.max_steps, start_.run_id, rng_, *data_.train, &model_path_, &error_))
    return fail(error_);
  ph_.checkpoint += seconds_since(t0);
  if (data_.have_val && !run_validation(c_.max_steps, &final_val_, trained_)) return fail(error_);
  if (c_.sample_tokens > 0 && !family_->sample(c_.eot_token, c_.sample_tokens, rng_.next_u64(), &samples_, &error_))
    return fail(error_);
  return 0;
}

Json TrainingRun::op_library_json() const {
  Json lib = Json::object();
  lib.set("backend", backend_.name);
  lib.set("path", backend_.path);
  lib.set("dtype", setup_.dtype_name);
  if (!device_.empty()) lib.set("device", device_);
  if (!backend_.auto_note.empty()) lib.set("note", backend_.auto_note);
  lib.set("graphs", setup_.graphs);
  if (!graphs_note_.empty()) lib.set("graphs_note", graphs_note_);
  lib.set("graph_recordings", step_graph_->recordings());
  Json configured = Json::object();  // the backend options given, by the library's keys
  for (const auto& [flag, key, value] : backend_options(c_))
    if (!value->empty()) configured.set(key, *value);
  lib.set("options", configured);
  // The CUDA library's attention kernel path (flash, thunderkittens), how often its fused
  // cuBLASLt epilogues ran fused (bf16), and what gemm_tune did.
  for (const char* key : {"attention", "fused_epilogues", "gemm_tune"}) {
    std::string text;
    if (library_report(backend_, key, &text)) lib.set(key, text);
  }
  if (!setup_.matmul.empty()) lib.set("matmul", setup_.matmul);
  return lib;
}

int TrainingRun::report() {
  Json report = Json::object();
  report.set("model_family", c_.model_family);
  report.set("template", c_.template_name);
  report.set("parameters", static_cast<uint64_t>(family_->num_parameters()));
  report.set("geometry", decoder_family(c_.model_family) ? decoder_geometry_json(c_.decoder) : geometry_json(c_.model));
  report.set("config", plan_json(c_));
  report.set("steps", c_.max_steps);
  report.set("resumed_from", start_.from.empty() ? Json() : Json(start_.from));
  report.set("run_id", start_.run_id);
  report.set("tokens_per_step", static_cast<int64_t>(c_.train_batch_tokens));
  report.set("train_tokens", trained_tokens_);
  // The targets the training losses counted: every token of token windows, the learned
  // (mask 1) ones of masked rows.
  report.set("train_targets", trained_targets_);
  report.set("train_tokens_per_second", train_time_ > 0 ? trained_tokens_ / train_time_ : 0.0);
  // Over the whole run (the first step's setup included), against the device's bf16 peak.
  report.set("mfu", peak_flops_ > 0 && train_time_ > 0
                        ? Json(token_flops_ * (trained_tokens_ / train_time_) / peak_flops_)
                        : Json());
  report.set("flops_per_token", token_flops_);  // the count behind mfu (cc/train/mfu.h), for benchmarks
  Json phases = Json::object();
  for (const auto& [key, seconds] : {std::pair{"data_s", ph_.data}, {"forward_backward_s", ph_.forward_backward},
                                     {"optimizer_s", ph_.optimizer}, {"wait_s", ph_.wait},
                                     {"validation_s", ph_.validation}, {"checkpoint_s", ph_.checkpoint}})
    phases.set(key, seconds);
  phases.set("total_s", seconds_since(t_start_));
  report.set("phase_seconds", phases);
  report.set("train_losses", train_losses_);
  report.set("step_seconds", step_seconds_);
  report.set("enqueue_seconds", enqueue_seconds_);
  report.set("final_train_loss", std::isfinite(last_loss_) ? Json(static_cast<double>(last_loss_)) : Json());
  report.set("validation_losses", val_losses_);
  report.set("final_validation_loss", std::isfinite(final_val_) ? Json(static_cast<double>(final_val_)) : Json());
  report.set("op_library", op_library_json());
  report.set("memory_bytes", static_cast<uint64_t>(memory_bytes()));  // in the run's dtype
  report.set("activation_bytes", static_cast<uint64_t>(activation_bytes()));
  report.set("stage_timing", stage_timing_ ? stage_timing_->report() : Json());
  report.set("checkpoint_dir", c_.output_dir);
  report.set("model_file", model_path_.empty() ? Json() : Json(model_path_));
  report.set("manifest_file", join_path(c_.output_dir, "manifest.json"));
  report.set("log_file", join_path(c_.output_dir, TrainLog::kFileName));
  const std::string report_path = join_path(c_.output_dir, "report.json");
  report.set("report_file", report_path);
  Json sample_ids = Json::array();
  for (int id : samples_) sample_ids.push(id);
  report.set("sample_tokens", sample_ids);
  if (!write_file_atomic(report_path, report.dump(2) + "\n", &error_)) return fail(error_);
  if (stage_timing_) stage_timing_->print_table(stderr);
  if (c_.json) std::printf("%s\n", report.dump(2).c_str());
  else if (model_path_.empty()) std::fprintf(stderr, "nfn: wrote %s (no checkpoint: --no-checkpoint)\n", report_path.c_str());
  else if (trained_) std::fprintf(stderr, "nfn: wrote %s and %s\n", model_path_.c_str(), report_path.c_str());
  else std::fprintf(stderr, "nfn: %s is at --max-steps already; wrote %s\n", model_path_.c_str(), report_path.c_str());
  return 0;
}

}  // namespace

int run_training(const TrainConfig& c) {
  if (c.dry_run) return print_plan(c);
  if (c.check_only) {
    std::string error;
    const int code = check_training(c, &error);
    return code == 0 ? 0 : fail(error, code);
  }
  TrainingRun run(c);
  return run.run();
}

int check_training(const TrainConfig& c, std::string* error) {
  // Everything a run checks before it reads data: the checkpoint to resume, the output
  // directory, and the op library with the flags given to it.
  Start start;
  Backend backend;
  RunSetup setup;
  int code = 1;
  const std::unique_ptr<ModelFamily> family = make_family(c);
  if (!resolve_resume(c, *family, &start, error) || !output_dir_writable(c.output_dir, error)) return 1;
  return setup_backend(c, &backend, &setup, &code, error) ? 0 : code;
}

}  // namespace nfn
