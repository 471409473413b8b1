// Everything one training run needs, resolved from flags, a template or a manifest, and
// the batch math checked before any data or device is touched.
#pragma once

#include <cstdint>
#include <string>

#include "cc/model/decoder_config.h"
#include "cc/model/gpt_config.h"
#include "cc/model/lora.h"
#include "cc/util/flags.h"
#include "cc/util/json.h"

namespace nfn {

struct TrainConfig {
  std::string model_family = "gpt";  // gpt, gpt2, gpt3 (the dense GPT); nanochat, llama (the decoder)
  std::string template_name;         // a preset name, "custom", "depth-N", or the manifest's
  std::string graph_file, weights;
  // --init-from's model file (weights holds it too) and, with --init-optimizer, its state file.
  std::string init_from, init_state;
  // Steps the optimizer's moments held before this run's first (a warm start's): AdamW's bias
  // correction counts them. From the init checkpoint's state, or the resumed run's marker.
  int moment_steps = 0;
  // The dense GPT's geometry; for the decoder families its shared fields (context, vocabulary,
  // layers, heads, channels) mirror `decoder`, which holds the whole of theirs.
  GPTConfig model;
  DecoderConfig decoder;
  LoraSpec lora;  // rank 0: the whole model trains

  std::string train_data, val_data;  // shard directory or file; val inferred when empty
  std::string dataset_name, tokenizer;
  int eot_token = -1;

  int seq_len = 0;               // T
  int batch_size = 0;            // B, micro-batch rows
  int64_t train_batch_tokens = 0;
  int grad_accum_steps = 1;
  int max_steps = 0;
  double learning_rate = 0, weight_decay = 0, max_grad_norm = 1.0;
  double final_lr_fraction = 0;  // the decay ends at this fraction of learning_rate
  double warmdown_ratio = 0;     // > 0: constant, then linear over this last part of the steps
  // nanochat's MuonAdamW learning rates besides the matrices' (learning_rate): embeddings, head,
  // scalars (DecoderRecipe).
  double embedding_lr = 0.3, unembedding_lr = 0.004, scalar_lr = 0.5;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  int warmup_steps = 0, eval_every_steps = 0, eval_batches = 0, checkpoint_every = 0;
  int eval_batch_size = 0;      // rows of a validation micro-batch
  bool write_checkpoints = true;  // false: --no-checkpoint
  uint64_t seed = 1337;
  bool seed_given = false;  // --seed named: else a resumed run keeps its checkpoint's run's seed
  // How rows are cut from the shards: "contiguous" (TokenBatchSampler) or "bestfit"
  // (BestFitSampler, buffering packing_buffer documents). Unnamed, a resumed run keeps its run's.
  std::string packing = "contiguous";
  int packing_buffer = 1000;
  bool packing_given = false, packing_buffer_given = false;
  int sample_tokens = 0;

  std::string backend = "auto", tile_ops_lib, dtype, matmul, threads, attention, gemm_tune, deterministic, overlap, pdl;
  std::string recompute = "none";  // none, attention, mlp or all (GPTRecompute)
  std::string lm_head_rows;  // the op library's lm_head_rows option ("" leaves its default)
  // Replay the micro-step as a recorded graph (StepGraph): on, off, or auto (where the op
  // library records graphs, and unless the first recording fails).
  std::string graphs = "auto";
  // Events between the stages of each step, read into per-stage times (StageTiming); the step
  // runs op by op, since a graph's recording cannot hold events.
  bool stage_timing = false;
  int checkpoint_version = 3;
  std::string output_dir, resume;
  bool dry_run = false, json = false;
  bool check_only = false;  // --check: what a run checks before it reads data, then exit
};

// Resolves flags (parsed from train_flag_specs) into a config: presets, family defaults, each GPT-2/3 template's recipe
// (llm.c's for GPT-2, the paper's for GPT-3), the CPU demo otherwise. false + one line
// naming the flag on bad input.
bool resolve_train_config(const Flags& flags, TrainConfig* out, std::string* error);
// Whether the dense GPT trainer takes this family (gpt, gpt2 or gpt3), from a flag or a manifest.
bool dense_gpt_family(const std::string& family);
// Whether the decoder trainer takes it (nanochat, llama).
bool decoder_family(const std::string& family);
// The learning rate at `step` (0-based): warmup, then the cosine decay, or with a warmdown
// ratio nanochat's constant-then-linear shape.
float scheduled_lr(const TrainConfig& c, int step);
// The --print-plan / --dry-run object: geometry, parameters, schedule, batch math.
Json plan_json(const TrainConfig& c);
Json geometry_json(const GPTConfig& g);

}  // namespace nfn
