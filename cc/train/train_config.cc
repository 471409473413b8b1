#include "cc/train/train_config.h"

#include <cmath>
#include <cstdlib>

#include "cc/model/gpt.h"
#include "cc/train/manifest.h"

namespace nfn {

namespace {
// Vocabularies up to this size get the demo's longer schedule (resolve_train_config).
constexpr int kDemoSmallVocab = 8192;

// The recipe's micro-batch: llm.c's 64 rows, halved until the model's state and a micro-batch's
// activations (in bf16, the GPU recipe's dtype) take at most 64 GiB, so that every GPT-2
// template runs as it comes on an 80 GB GPU, with room left for the op library's own scratch
// (the CUDA LM head's logits, up to 2 GiB) and the driver's. GPT-2 124M and 350M keep 64
// (20.7 and 54.4 GiB), 774M gets 32, 1558M 16 (61.2 GiB); --batch-size overrides.
constexpr size_t kRecipeMemoryBytes = size_t{64} << 30;

int recipe_micro_batch(const GPTConfig& model, int T) {
  int B = 64;
  while (B > 1 && GPT::memory_bytes(model, NFN_BF16, B, T) > kRecipeMemoryBytes) B /= 2;
  return B;
}

// Each GPT-2/3 template's optimization, the rest (weight decay 0.1, 20,000 steps, validation
// every 250 over 20 batches) shared. GPT-2's sizes as llm.c's reproduction scripts train them
// (124M with 60 warmup steps, as the CPU trainer's issue set it; 350M, 774M and 1558M with
// 700); GPT-3's as the paper's Table 2.1 gives them (learning rate, tokens a step), warmed up
// over its first 375M tokens and decayed to 10% of the peak.
struct Recipe {
  const char* template_name;
  double learning_rate;
  int64_t train_batch_tokens;
  int warmup_steps;
  double final_lr_fraction;
};
constexpr int64_t kHalfM = 524288, kOneM = 1048576;
constexpr Recipe kRecipes[] = {
    {"gpt2-124m", 6e-4, kHalfM, 60, 0.0},     {"gpt2-350m", 3e-4, kHalfM, 700, 0.0},
    {"gpt2-774m", 2.5e-4, kHalfM, 700, 0.0},  {"gpt2-1558m", 6e-4, kOneM, 700, 0.1},
    {"gpt3-125m", 6e-4, kHalfM, 715, 0.1},    {"gpt3-350m", 3e-4, kHalfM, 715, 0.1},
    {"gpt3-760m", 2.5e-4, kHalfM, 715, 0.1},  {"gpt3-1.3b", 2e-4, kOneM, 358, 0.1},
    {"gpt3-2.7b", 1.6e-4, kOneM, 358, 0.1},
};

// The template's recipe; GPT-2 124M's for a GPT-2/3 name without one of its own (a manifest
// written by an older trainer, or a template added without a recipe).
const Recipe& recipe_of(const std::string& name) {
  for (const Recipe& r : kRecipes)
    if (name == r.template_name) return r;
  return kRecipes[0];
}
}  // namespace

void declare_train_flags(Flags* f) {
  f->value("model-family", "gpt, gpt2 or gpt3 (one dense GPT trainer; with --graph-file, its manifest's, which another value contradicts)", "gpt");
  f->value("template-name", "named geometry and its recipe: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt3-125m, "
                            "gpt3-350m, gpt3-760m, gpt3-1.3b, gpt3-2.7b, tiny");
  f->value("preset", "same as --template-name");
  f->value("graph-file", "manifest JSON whose geometry is the architecture's source of truth");
  f->value("weights", "model_%08d.bin to start from (its geometry must match)");
  f->value("num-layers", "transformer blocks");
  f->value("num-heads", "attention heads");
  f->value("model-dim", "channels");
  f->value("vocab-size", "vocabulary size of the tokenizer", "50257");
  f->value("train-data", "training shards: a directory or a *_train_*.bin file");
  f->value("val-data", "validation shards (default: the train shards' *_val_* siblings)");
  f->value("dataset-name", "dataset name recorded in the manifest");
  f->value("tokenizer", "tokenizer name recorded in the manifest", "gpt2");
  f->value("eot-token", "document separator id, the start token of samples (default: 50256 for GPT-2's vocabulary, else 0)");
  f->value("train-seq-len", "tokens per row, T");
  f->value("batch-size", "micro-batch rows, B (GPT-2/3 templates: 64, halved until the model and activations "
                         "fit 64 GiB in bf16; the demo: 16, or 8 with a vocabulary over 8192)");
  f->value("train-batch-tokens", "tokens per optimizer step (a multiple of B*T; the rest is gradient accumulation)");
  f->value("max-steps", "optimizer steps");
  f->value("learning-rate", "peak learning rate");
  f->value("weight-decay", "AdamW weight decay of matrices and embeddings");
  f->value("warmup-steps", "linear warmup steps before the cosine decay");
  f->value("final-lr-fraction", "where the cosine decay ends at --max-steps, a fraction of the peak learning rate "
                                "(GPT-3 templates and gpt2-1558m: 0.1; else 0)");
  f->value("eval-every-steps", "validate every N steps (and at the end)");
  f->value("eval-batches", "validation micro-batches per validation");
  f->value("checkpoint-every", "also write a checkpoint every N steps (0: only at the end)", "0");
  f->value("max-grad-norm", "clip the global gradient norm to this (0: no clipping)", "1.0");
  f->value("seed", "seed of the initialisation, data order and samples", "1337");
  f->value("sample-tokens", "generate this many tokens after training (reported as ids; at most the context less one)", "0");
  f->value("backend", "op library: cpu, cuda or auto", "auto");
  f->value("tile-ops-lib", "path of the op library to load (overrides --backend)");
  f->value("dtype", "storage of parameters and activations: f32 or bf16 (default: f32 on the CPU, bf16 on CUDA)");
  f->value("matmul", "CPU GEMM compute: f32 or bf16 (f32 accumulation); default bf16 where the CPU has bf16 "
                     "units (AVX512-BF16, AMX), else f32");
  f->value("threads", "CPU threads (default: all cores)");
  f->value("attention", "CUDA attention kernels: cudnn (cuDNN SDPA; the default where cuDNN loads), flash_mma (tensor cores; the default otherwise), flash (CUDA cores) or thunderkittens");
  f->value("gemm-tune", "CUDA: on times cuBLASLt's first 8 kernels for each GEMM shape on its first call and keeps the fastest, in ~/.cache/nfn/gemm_tune/ (or $NFN_GEMM_TUNE_CACHE), where later runs on the same GPU take them from; off: cuBLASLt's first pick (the library's default)");
  f->value("deterministic", "on: every kernel repeats bit for bit (the libraries' default); off: CUDA's cuDNN attention backward may add dQ with atomics, its faster form");
  f->value("overlap", "CUDA: on runs each linear backward's weight and bias gradients on a second stream beside its input gradient (the same results); off: one stream (the library's default)");
  f->value("pdl", "CUDA: on launches each of the library's kernels as a programmatic dependent launch, so its blocks may start while the kernel before it finishes (the same results); off: each starts after (the library's default)");
  f->value("graphs", "on: record the forward/backward micro-step once as a CUDA graph and replay it (after one step run op by op); off: launch every op; auto: on where the op library records graphs (CUDA), op by op if the first recording fails", "auto");
  f->value("checkpoint-dtype", "model file precision: f32 (llm.c version 3) or bf16 (version 5)", "f32");
  f->value("output-dir", "where checkpoints, the manifest and the report go (default: $NEURALFN_ARTIFACTS_DIR/FAMILY or ~/NeuralFn/artifacts/FAMILY, FAMILY the model family)");
  f->value("resume", "auto (the last checkpoint written in --output-dir, the one its manifest.json names; none: start fresh), a checkpoint directory (the same there) or a model_%08d.bin file");
  f->toggle("dry-run", "print the plan as JSON and exit without reading data (the flags checked, the op library not opened: a GPU run's plan can be made anywhere)");
  f->toggle("check", "check the flags against what a run needs before it reads data (the op library and the options given to it, attention at the model's geometry, the checkpoint to resume, the output directory), print nothing and exit: what nfn train runs before it prepares a dataset");
  f->toggle("print-plan", "same as --dry-run");
  f->toggle("json", "print the final report as JSON on stdout");
  f->toggle("help", "show this help");
}

Json geometry_json(const GPTConfig& g) {
  Json j = Json::object();
  j.set("max_seq_len", g.max_seq_len);
  j.set("vocab_size", g.vocab_size);
  j.set("padded_vocab_size", g.padded_vocab_size);
  j.set("num_layers", g.num_layers);
  j.set("num_heads", g.num_heads);
  j.set("channels", g.channels);
  return j;
}

namespace {

bool read_int(const Flags& f, const char* name, int* out, int min_value, std::string* error) {
  if (!f.has(name) && f.get(name).empty()) return true;
  long long v;
  if (!f.get_int(name, &v, error)) return false;
  if (v < min_value || v > 2147483647LL) {
    *error = std::string("--") + name + ": " + std::to_string(v) + " is out of range (at least " +
             std::to_string(min_value) + ")";
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool read_float(const Flags& f, const char* name, double* out, std::string* error) {
  if (!f.has(name) && f.get(name).empty()) return true;
  double v;
  if (!f.get_double(name, &v, error)) return false;
  if (!std::isfinite(v)) {
    *error = std::string("--") + name + ": " + f.get(name) + " is not a finite number";
    return false;
  }
  if (v < 0) {
    *error = std::string("--") + name + ": must not be negative";
    return false;
  }
  *out = v;
  return true;
}

// The family's folder of the artifacts directory, as `nfn train` chooses it.
std::string default_output_dir(const std::string& family) {
  const char* env = std::getenv("NEURALFN_ARTIFACTS_DIR");
  if (env != nullptr && *env) return std::string(env) + "/" + family;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/NeuralFn/artifacts/" + family;
}

}  // namespace

bool dense_gpt_family(const std::string& family) {
  return family == "gpt" || family == "gpt2" || family == "gpt3";
}

bool resolve_train_config(const Flags& f, TrainConfig* c, std::string* error) {
  c->model_family = f.get("model-family");
  if (!dense_gpt_family(c->model_family)) {
    *error = "--model-family " + c->model_family + ": the dense GPT trainer takes gpt, gpt2 or gpt3";
    return false;
  }
  std::string tmpl = f.has("template-name") ? f.get("template-name") : f.get("preset");
  const bool geometry_flags = f.has("num-layers") || f.has("num-heads") || f.has("model-dim");
  bool recipe = false;  // the schedule is a GPT-2/3 template's recipe (recipe_of)
  // Unset, the tokenizer and end-of-text token are a --graph-file manifest's, else the defaults.
  c->tokenizer = f.has("tokenizer") ? f.get("tokenizer") : "";
  c->eot_token = -1;
  c->graph_file = f.get("graph-file");
  if (!c->graph_file.empty()) {
    if (!tmpl.empty() || geometry_flags || f.has("vocab-size")) {
      *error = "--graph-file sets the architecture; drop --template-name/--num-layers/--num-heads/--model-dim/--vocab-size";
      return false;
    }
    const std::string family_flag = c->model_family;
    if (!read_manifest(c->graph_file, c, error)) return false;
    // The manifest's family is the model's: a --model-family (or nfn_native_train's
    // --base-model) naming another is a contradiction, not an override.
    if (f.has("model-family") && c->model_family != family_flag) {
      *error = "the model family " + family_flag + " (--model-family, or nfn_native_train's --base-model) contradicts " +
               c->graph_file + ", whose model_family is " + c->model_family + "; give one";
      return false;
    }
    recipe = c->template_name.rfind("gpt2-", 0) == 0 || c->template_name.rfind("gpt3-", 0) == 0;
  }
  if (c->tokenizer.empty()) c->tokenizer = f.get("tokenizer");
  if (c->graph_file.empty()) {
    if (!tmpl.empty()) {
      if (!preset_config(tmpl, &c->model)) {
        std::string names;
        for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
        *error = "--template-name " + tmpl + ": unknown (known: " + names + ")";
        return false;
      }
      c->template_name = tmpl;
      recipe = tmpl != "tiny";
    } else {
      preset_config("tiny", &c->model);
      c->template_name = geometry_flags ? "custom" : "tiny";
      // gpt3's 2048 context applies only when nothing else chose the length.
      if (c->model_family == "gpt3" && !f.has("train-seq-len")) c->model.max_seq_len = 2048;
    }
    if (!read_int(f, "num-layers", &c->model.num_layers, 1, error) ||
        !read_int(f, "num-heads", &c->model.num_heads, 1, error) ||
        !read_int(f, "model-dim", &c->model.channels, 1, error) ||
        !read_int(f, "vocab-size", &c->model.vocab_size, 2, error))
      return false;
    c->model.padded_vocab_size = pad_vocab(c->model.vocab_size);
  }
  c->seq_len = c->model.max_seq_len;
  if (!read_int(f, "train-seq-len", &c->seq_len, 1, error)) return false;
  if (f.has("train-seq-len") && tmpl.empty() && c->graph_file.empty()) c->model.max_seq_len = c->seq_len;
  if (c->seq_len > c->model.max_seq_len) {
    *error = "--train-seq-len " + std::to_string(c->seq_len) + " exceeds the model's context " +
             std::to_string(c->model.max_seq_len);
    return false;
  }
  std::string bad = validate_config(c->model);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }

  // Schedule defaults: the template's recipe for GPT-2/3 templates, a CPU demo otherwise.
  if (recipe) {
    const Recipe& r = recipe_of(c->template_name);
    c->batch_size = recipe_micro_batch(c->model, c->seq_len);
    c->train_batch_tokens = r.train_batch_tokens;
    c->max_steps = 20000;
    c->learning_rate = r.learning_rate;
    c->weight_decay = 0.1;
    c->warmup_steps = r.warmup_steps;
    c->final_lr_fraction = r.final_lr_fraction;
    c->eval_every_steps = 250;
    c->eval_batches = 20;
  } else {
    // The demo, one micro-batch per step. With a small vocabulary (`nfn train` gives it sp1024
    // on Shakespeare): 2M tokens, about 2.5 minutes on two CPU cores. A GPT-2-sized one makes
    // the LM head most of the work (50257 x 128 against 0.8M parameters in the blocks), so
    // fewer and smaller steps keep it to minutes.
    const bool small = c->model.vocab_size <= kDemoSmallVocab;
    c->batch_size = small ? 16 : 8;
    c->train_batch_tokens = 0;
    c->max_steps = small ? 1000 : 300;
    c->learning_rate = small ? 2e-3 : 1e-3;
    c->weight_decay = 0.1;
    c->warmup_steps = small ? 50 : 20;
    c->eval_every_steps = small ? 250 : 100;
    c->eval_batches = small ? 16 : 8;
  }
  int tbt = 0;
  if (!read_int(f, "batch-size", &c->batch_size, 1, error) ||
      !read_int(f, "train-batch-tokens", &tbt, 1, error) ||
      !read_int(f, "max-steps", &c->max_steps, 1, error) ||
      !read_int(f, "warmup-steps", &c->warmup_steps, 0, error) ||
      !read_int(f, "eval-every-steps", &c->eval_every_steps, 0, error) ||
      !read_int(f, "eval-batches", &c->eval_batches, 0, error) ||
      !read_int(f, "checkpoint-every", &c->checkpoint_every, 0, error) ||
      !read_int(f, "sample-tokens", &c->sample_tokens, 0, error) ||
      !read_float(f, "learning-rate", &c->learning_rate, error) ||
      !read_float(f, "weight-decay", &c->weight_decay, error) ||
      !read_float(f, "max-grad-norm", &c->max_grad_norm, error) ||
      !read_float(f, "final-lr-fraction", &c->final_lr_fraction, error))
    return false;
  if (c->final_lr_fraction > 1) {
    *error = "--final-lr-fraction " + f.get("final-lr-fraction") + ": must be at most 1 (a fraction of the peak)";
    return false;
  }
  if (tbt > 0) c->train_batch_tokens = tbt;
  const int64_t micro = static_cast<int64_t>(c->batch_size) * c->seq_len;
  if (c->train_batch_tokens == 0) c->train_batch_tokens = micro;
  if (c->train_batch_tokens % micro != 0) {
    *error = "--train-batch-tokens " + std::to_string(c->train_batch_tokens) +
             " is not a multiple of micro-batch x seq_len = " + std::to_string(c->batch_size) + " x " +
             std::to_string(c->seq_len) + " = " + std::to_string(micro);
    return false;
  }
  c->grad_accum_steps = static_cast<int>(c->train_batch_tokens / micro);
  long long seed;
  if (!f.get_int("seed", &seed, error)) return false;
  c->seed = static_cast<uint64_t>(seed);
  if (c->eot_token < 0) c->eot_token = c->model.vocab_size == 50257 ? 50256 : 0;
  if (!read_int(f, "eot-token", &c->eot_token, 0, error)) return false;
  if (c->eot_token >= c->model.vocab_size) {
    *error = "--eot-token " + std::to_string(c->eot_token) + " is outside the vocabulary of " +
             std::to_string(c->model.vocab_size);
    return false;
  }

  c->train_data = f.get("train-data");
  c->val_data = f.get("val-data");
  c->dataset_name = f.get("dataset-name");
  c->weights = f.get("weights");
  c->backend = f.get("backend");
  c->tile_ops_lib = f.get("tile-ops-lib");
  c->dtype = f.get("dtype");
  c->matmul = f.get("matmul");
  c->threads = f.get("threads");
  c->attention = f.get("attention");
  c->gemm_tune = f.get("gemm-tune");
  c->deterministic = f.get("deterministic");
  c->overlap = f.get("overlap");
  c->pdl = f.get("pdl");
  c->graphs = f.get("graphs");
  if (c->graphs != "on" && c->graphs != "off" && c->graphs != "auto") {
    *error = "--graphs " + c->graphs + ": expected on, off or auto";
    return false;
  }
  if (!c->dtype.empty() && c->dtype != "f32" && c->dtype != "bf16") {
    *error = "--dtype " + c->dtype + ": expected f32 or bf16";
    return false;
  }
  const std::string ck = f.get("checkpoint-dtype");
  if (ck != "f32" && ck != "bf16") {
    *error = "--checkpoint-dtype " + ck + ": expected f32 or bf16";
    return false;
  }
  c->checkpoint_version = ck == "f32" ? 3 : 5;
  c->output_dir = f.has("output-dir") ? f.get("output-dir") : default_output_dir(c->model_family);
  if (c->output_dir.empty()) {
    *error = "--output-dir: empty (name a directory)";
    return false;
  }
  c->resume = f.get("resume");
  c->dry_run = f.on("dry-run") || f.on("print-plan");
  c->check_only = f.on("check");
  if (c->check_only && c->dry_run) {
    *error = "--check and --dry-run: give one (a check prints nothing, a dry run the plan)";
    return false;
  }
  c->json = f.on("json");
  return true;
}

Json plan_json(const TrainConfig& c) {
  Json p = Json::object();
  p.set("model_family", c.model_family);
  p.set("template", c.template_name);
  p.set("geometry", geometry_json(c.model));
  p.set("parameters", static_cast<uint64_t>(num_parameters(c.model)));
  Json batch = Json::object();
  batch.set("seq_len", c.seq_len);
  batch.set("batch_size", c.batch_size);
  batch.set("train_batch_tokens", static_cast<int64_t>(c.train_batch_tokens));
  batch.set("grad_accum_steps", c.grad_accum_steps);
  p.set("batch", batch);
  // The op library's block for the model's state and a micro-batch's activations, in GiB to
  // 0.01, by the dtype trained in (bf16 on CUDA by default, f32 on the CPU).
  Json memory = Json::object();
  for (nfn_dtype dtype : {NFN_BF16, NFN_F32}) {
    const double gib = static_cast<double>(GPT::memory_bytes(c.model, dtype, c.batch_size, c.seq_len)) / (1 << 30);
    memory.set(dtype == NFN_BF16 ? "bf16" : "f32", std::round(gib * 100) / 100);
  }
  p.set("memory_gib", memory);
  Json s = Json::object();
  s.set("max_steps", c.max_steps);
  s.set("learning_rate", c.learning_rate);
  s.set("warmup_steps", c.warmup_steps);
  s.set("final_lr_fraction", c.final_lr_fraction);
  s.set("decay", c.final_lr_fraction == 0 ? "cosine to zero" : "cosine to final_lr_fraction of the peak");
  s.set("weight_decay", c.weight_decay);
  s.set("max_grad_norm", c.max_grad_norm);
  s.set("eval_every_steps", c.eval_every_steps);
  s.set("eval_batches", c.eval_batches);
  s.set("total_tokens", static_cast<int64_t>(c.train_batch_tokens * c.max_steps));
  p.set("schedule", s);
  Json data = Json::object();
  data.set("train", c.train_data);
  data.set("val", c.val_data);
  data.set("dataset_name", c.dataset_name);
  data.set("tokenizer", c.tokenizer);
  p.set("data", data);
  Json lib = Json::object();
  lib.set("backend", c.backend);
  lib.set("tile_ops_lib", c.tile_ops_lib);
  p.set("op_library", lib);
  p.set("output_dir", c.output_dir);
  p.set("resume", c.resume);
  p.set("seed", static_cast<int64_t>(c.seed));  // as --seed gave it (the manifest's too)
  return p;
}

}  // namespace nfn
