#include "cc/train/train_config.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/ckpt/safetensors.h"
#include "cc/model/decoder.h"
#include "cc/model/gpt.h"
#include "cc/train/family.h"
#include "cc/train/find_checkpoint.h"
#include "cc/train/manifest.h"
#include "cc/train/resolve_decoder.h"
#include "cc/train/schedule.h"
#include "cc/util/artifacts.h"
#include "cc/util/quant.h"
#include "cc/util/files.h"

namespace nfn {

namespace {
// Vocabularies up to this size get the demo's longer schedule (resolve_train_config).
constexpr int kDemoSmallVocab = 8192;

// The recipe's micro-batch: llm.c's 64 rows, halved until the model's state and a micro-batch's
// activations (in bf16, the GPU recipe's dtype) take at most 64 GiB, so that every GPT-2
// template runs as it comes on an 80 GB GPU, with room left for the op library's own scratch
// (the CUDA LM head's logits, up to 2 GiB) and the driver's. GPT-2 124M and 350M keep 64
// (20.7 and 54.4 GiB), 774M gets 32, 1558M 16 (61.2 GiB); --batch-size overrides. Every
// activation kept, whatever --recompute says: a recipe's micro-batch is the same in each mode.
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

// Flag values parse has checked (type, range, choice), read where given.
void read_int(const Flags& f, const char* name, int* out) {
  if (f.has(name)) *out = static_cast<int>(f.get_int(name));
}
void read_float(const Flags& f, const char* name, double* out) {
  if (f.has(name)) *out = f.get_double(name);
}

// The family's folder of the artifacts directory.
std::string default_output_dir(const std::string& family) { return artifacts_dir() + "/" + family; }

// The architecture from a --graph-file manifest; whether its template has a GPT-2/3 recipe.
bool model_from_graph(const Flags& f, TrainConfig* c, bool* recipe, std::string* error) {
  if (f.has("template-name") || f.has("num-layers") || f.has("num-heads") || f.has("model-dim") ||
      f.has("vocab-size")) {
    *error = "--graph-file sets the architecture; drop --template-name/--num-layers/--num-heads/--model-dim/--vocab-size";
    return false;
  }
  const std::string family_flag = c->model_family;
  if (!read_manifest(c->graph_file, c, error)) return false;
  // The manifest's family is the model's: a --model-family naming another is a
  // contradiction, not an override.
  if (f.has("model-family") && c->model_family != family_flag) {
    *error = "--model-family " + family_flag + " contradicts " + c->graph_file + ", whose model_family is " +
             c->model_family + "; give one";
    return false;
  }
  *recipe = c->template_name.rfind("gpt2-", 0) == 0 || c->template_name.rfind("gpt3-", 0) == 0;
  return true;
}

// The architecture from --template-name or the demo's, with the geometry flags over it.
bool model_from_flags(const Flags& f, TrainConfig* c, bool* recipe, std::string* error) {
  const std::string tmpl = f.get("template-name");
  if (!tmpl.empty()) {
    if (!preset_config(tmpl, &c->model)) {
      std::string names;
      for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
      *error = "--template-name " + tmpl + ": unknown (known: " + names + ")";
      return false;
    }
    c->template_name = tmpl;
    *recipe = tmpl != "tiny";
  } else {
    preset_config("tiny", &c->model);
    const bool geometry_flags = f.has("num-layers") || f.has("num-heads") || f.has("model-dim");
    c->template_name = geometry_flags ? "custom" : "tiny";
    // gpt3's 2048 context applies only when nothing else chose the length.
    if (c->model_family == "gpt3" && !f.has("train-seq-len")) c->model.max_seq_len = 2048;
    // A custom model's context is the rows it trains on.
    if (f.has("train-seq-len")) c->model.max_seq_len = static_cast<int>(f.get_int("train-seq-len"));
  }
  read_int(f, "num-layers", &c->model.num_layers);
  read_int(f, "num-heads", &c->model.num_heads);
  read_int(f, "model-dim", &c->model.channels);
  read_int(f, "vocab-size", &c->model.vocab_size);
  c->model.padded_vocab_size = pad_vocab(c->model.vocab_size);
  return true;
}

// The geometry flags a --init-from checkpoint's geometry answers: each given must agree.
bool geometry_flags_agree(const Flags& f, const TrainConfig& c, const std::string& path, std::string* error) {
  const bool decoder = decoder_family(c.model_family);
  std::vector<std::pair<const char*, int>> ints = {{"num-layers", c.model.num_layers},
                                                   {"num-heads", c.model.num_heads},
                                                   {"model-dim", c.model.channels},
                                                   {"vocab-size", c.model.vocab_size}};
  if (decoder) {
    ints.push_back({"num-kv-heads", c.decoder.num_kv_heads});
    ints.push_back({"mlp-hidden", c.decoder.hidden});
  }
  auto contradicts = [&](const std::string& flag, const std::string& given, const std::string& have) {
    *error = "--" + flag + " " + given + " contradicts the --init-from checkpoint's " + have + " (" + path +
             "; leave the flag out: the geometry is the checkpoint's)";
    return false;
  };
  for (const auto& [flag, have] : ints)
    if (f.has(flag) && f.get_int(flag) != have) return contradicts(flag, f.get(flag), std::to_string(have));
  if (!decoder) return true;
  if (f.has("window-pattern") && f.get("window-pattern") != c.decoder.window_pattern)
    return contradicts("window-pattern", f.get("window-pattern"), c.decoder.window_pattern);
  if (f.has("rope-theta") && static_cast<float>(f.get_double("rope-theta")) != c.decoder.rope_theta)
    return contradicts("rope-theta", f.get("rope-theta"), Json(static_cast<double>(c.decoder.rope_theta)).dump());
  if (f.has("tie-embeddings") && !c.decoder.tied_head) return contradicts("tie-embeddings", "", "untied head");
  return true;
}

// The architecture from a --init-from checkpoint (a trainer's directory or model file): its
// family, which --model-family must name (the binary's own where none is given), its geometry,
// and its manifest's template name, tokenizer and end-of-text id; the weights file and, with
// --init-optimizer, the state file beside it.
bool model_from_checkpoint(const Flags& f, TrainConfig* c, std::string* error) {
  const std::string spec = f.get("init-from");
  for (const char* name : {"weights", "graph-file", "template-name", "depth"})
    if (f.has(name)) {
      *error = std::string("--init-from takes the model from its checkpoint; drop --") + name;
      return false;
    }
  const bool optimizer = f.has("init-optimizer");
  FoundCheckpoint found;
  if (!find_checkpoint(spec, optimizer, artifacts_dir(), &found, error)) {
    *error = "--init-from: " + *error;
    return false;
  }
  const std::string& path = found.path;
  if (found.kind != "llmc") {
    *error = "--init-from " + spec + ": a Hugging Face directory, not a checkpoint of nfn's trainers";
    return false;
  }
  const std::string family = weights_family(path);
  if (family.empty()) {
    *error = "--init-from " + path + ": not a model file of nfn's trainers (an llm.c model file, or a safetensors "
             "file whose __metadata__ names its model_family)";
    return false;
  }
  if (decoder_family(family) ? family != c->model_family : !dense_gpt_family(c->model_family)) {
    *error = "--init-from " + path + ": holds a " + family + " model, not " + c->model_family +
             " (name --model-family " + family + ", or leave it out to nfn_native_train)";
    return false;
  }
  if (decoder_family(family)) {
    SafetensorsInfo info;
    if (!read_safetensors_header(path, &info, error)) return false;
    const auto geometry = info.metadata.find("geometry");
    std::string why;
    if (!decoder_config_from_json(family == "nanochat" ? DecoderFamily::kNanochat : DecoderFamily::kLlama,
                                  geometry == info.metadata.end() ? "" : geometry->second, &c->decoder, &why)) {
      *error = path + ": __metadata__ " + why;
      return false;
    }
    const DecoderConfig& d = c->decoder;
    c->model.max_seq_len = d.max_seq_len;
    c->model.vocab_size = d.vocab_size;
    c->model.padded_vocab_size = d.padded_vocab_size;
    c->model.num_layers = d.num_layers;
    c->model.num_heads = d.num_heads;
    c->model.channels = d.channels;
  } else {
    int version = 0;
    if (!read_model_header(path, &c->model, &version, error)) return false;
  }
  if (!geometry_flags_agree(f, *c, path, error)) return false;
  const Json manifest = found.manifest.empty() ? Json() : read_object(found.manifest);
  auto text = [&](const char* key) {
    const Json* v = manifest.is_object() ? manifest.find(key) : nullptr;
    return v != nullptr && v->is_string() ? v->as_string() : std::string();
  };
  c->template_name = text("template").empty() ? "custom" : text("template");
  if (c->tokenizer.empty()) c->tokenizer = text("tokenizer");
  const Json* eot = manifest.is_object() ? manifest.find("eot_token") : nullptr;
  if (eot != nullptr && eot->is_integer() && c->eot_token < 0) c->eot_token = static_cast<int>(eot->as_integer());
  c->weights = c->init_from = path;
  if (optimizer) {
    c->init_state = found.step < 0 ? "" : join_path(dir_name(path), state_file_name(found.step));
    if (c->init_state.empty() || !path_exists(c->init_state)) {
      *error = "--init-optimizer: " + path + " has no optimizer state beside it (" +
               (found.step < 0 ? std::string("a trainer's model_%08d.bin has its state_%08d_00000.bin")
                               : c->init_state + " is missing") + ")";
      return false;
    }
  }
  return true;
}

// Family, architecture and sequence length; whether the schedule is a template's recipe.
bool resolve_model(const Flags& f, TrainConfig* c, bool* recipe, std::string* error) {
  c->model_family = f.get("model-family");
  if (!dense_gpt_family(c->model_family) && !decoder_family(c->model_family)) {
    *error = "--model-family " + c->model_family + ": the trainers take gpt, gpt2, gpt3, nanochat or llama";
    return false;
  }
  // Unset, the tokenizer and end-of-text token are a --graph-file manifest's, else the defaults.
  c->tokenizer = f.has("tokenizer") ? f.get("tokenizer") : "";
  c->eot_token = -1;
  c->graph_file = f.get("graph-file");
  *recipe = false;
  if (f.has("init-optimizer") && !f.has("init-from")) {
    *error = "--init-optimizer restores the moments of the --init-from checkpoint: name it";
    return false;
  }
  if (f.has("init-from")) {
    if (!model_from_checkpoint(f, c, error)) return false;
  } else if (decoder_family(c->model_family)) {
    preset_config("tiny", &c->model);  // the demo's vocabulary, unless --vocab-size
    if (!resolve_decoder_model(f, c, recipe, error)) return false;
  } else if (!(c->graph_file.empty() ? model_from_flags(f, c, recipe, error)
                                      : model_from_graph(f, c, recipe, error))) {
    return false;
  }
  if (c->tokenizer.empty()) c->tokenizer = f.get("tokenizer");
  c->seq_len = c->model.max_seq_len;
  read_int(f, "train-seq-len", &c->seq_len);
  if (c->seq_len > c->model.max_seq_len) {
    *error = "--train-seq-len " + std::to_string(c->seq_len) + " exceeds the model's context " +
             std::to_string(c->model.max_seq_len);
    return false;
  }
  if (decoder_family(c->model_family)) return true;  // resolve_decoder_model validated it
  const std::string bad = validate_config(c->model);
  if (!bad.empty()) *error = "model geometry: " + bad;
  return bad.empty();
}

// The schedule's defaults: the template's recipe for GPT-2/3 templates, a CPU demo otherwise.
void default_schedule(bool recipe, TrainConfig* c) {
  c->max_grad_norm = 1.0;
  if (decoder_family(c->model_family)) {
    default_decoder_schedule(recipe, c);
    return;
  }
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
    return;
  }
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

// The schedule: defaults, the flags over them, the batch math and the end-of-text token.
bool resolve_schedule(const Flags& f, bool recipe, TrainConfig* c, std::string* error) {
  default_schedule(recipe, c);
  int tbt = 0;
  read_int(f, "batch-size", &c->batch_size);
  read_int(f, "train-batch-tokens", &tbt);
  read_int(f, "max-steps", &c->max_steps);
  read_int(f, "warmup-steps", &c->warmup_steps);
  read_int(f, "eval-every-steps", &c->eval_every_steps);
  read_int(f, "eval-batches", &c->eval_batches);
  c->checkpoint_every = static_cast<int>(f.get_int("checkpoint-every"));
  c->write_checkpoints = !f.has("no-checkpoint");
  c->eval_batch_size = c->batch_size;
  read_int(f, "eval-batch-size", &c->eval_batch_size);
  c->sample_tokens = static_cast<int>(f.get_int("sample-tokens"));
  read_float(f, "learning-rate", &c->learning_rate);
  read_float(f, "weight-decay", &c->weight_decay);
  read_float(f, "final-lr-fraction", &c->final_lr_fraction);
  read_float(f, "max-grad-norm", &c->max_grad_norm);
  read_float(f, "warmdown-ratio", &c->warmdown_ratio);
  read_float(f, "embedding-lr", &c->embedding_lr);
  read_float(f, "unembedding-lr", &c->unembedding_lr);
  read_float(f, "scalar-lr", &c->scalar_lr);
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
  c->seed = static_cast<uint64_t>(f.get_int("seed"));
  c->seed_given = f.has("seed");
  c->packing = f.get("packing");
  c->packing_given = f.has("packing");
  c->packing_buffer = static_cast<int>(f.get_int("packing-buffer"));
  c->packing_buffer_given = f.has("packing-buffer");
  if (c->eot_token < 0) c->eot_token = c->model.vocab_size == 50257 ? 50256 : 0;
  read_int(f, "eot-token", &c->eot_token);
  if (c->eot_token >= c->model.vocab_size) {
    *error = "--eot-token " + std::to_string(c->eot_token) + " is outside the vocabulary of " +
             std::to_string(c->model.vocab_size);
    return false;
  }
  return true;
}

// LoRA's flags: adapters over the --init-from model of a decoder family.
bool resolve_lora(const Flags& f, TrainConfig* c, std::string* error) {
  const bool on = f.has("lora-rank") && f.get_int("lora-rank") > 0;
  for (const char* name : {"lora-alpha", "lora-targets", "quantize-base"})
    if (f.has(name) && !on) {
      *error = std::string("--") + name + " shapes LoRA adapters: give --lora-rank R too";
      return false;
    }
  if (!on) return true;
  if (!decoder_family(c->model_family)) {
    *error = "--lora-rank: LoRA adapters train on nanochat and llama models, not " + c->model_family;
    return false;
  }
  if (c->init_from.empty()) {
    *error = "--lora-rank trains adapters over a trained model: name it with --init-from CHECKPOINT";
    return false;
  }
  if (!c->init_state.empty()) {
    *error = "--init-optimizer: a LoRA run's optimizer holds its adapters only, so the base's moments do not apply";
    return false;
  }
  c->lora.rank = static_cast<int>(f.get_int("lora-rank"));
  c->lora.alpha = f.has("lora-alpha") ? static_cast<float>(f.get_double("lora-alpha")) : static_cast<float>(c->lora.rank);
  const std::string targets = f.has("lora-targets") ? f.get("lora-targets") : "all";
  c->lora.attention = targets != "mlp";
  c->lora.mlp = targets != "attn";
  c->lora.quant = f.has("quantize-base") ? quant::parse_type(f.get("quantize-base")) : -1;
  const std::string bad = validate_lora(c->lora);
  if (!bad.empty()) {
    *error = "--lora-alpha: " + bad;
    return false;
  }
  for (const auto& layer : lora_targets(c->decoder, c->lora))
    for (const LoraTarget& t : layer)
      if (t.on && c->lora.rank > std::min(t.in, t.out)) {
        *error = "--lora-rank " + std::to_string(c->lora.rank) + " exceeds an adapted matrix's smaller side (" +
                 std::to_string(t.out) + " x " + std::to_string(t.in) + ")";
        return false;
      }
  return true;
}

// Data, op library, checkpoints and output: the flags as given.
bool resolve_run(const Flags& f, TrainConfig* c, std::string* error) {
  c->train_data = f.get("train-data");
  c->val_data = f.get("val-data");
  c->dataset_name = f.get("dataset-name");
  if (c->init_from.empty()) c->weights = f.get("weights");  // else --init-from's model file
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
  c->lm_head_rows = f.get("lm-head-row-chunk-size");
  if (!resolve_lora(f, c, error)) return false;
  c->recompute = f.get("recompute");
  if (decoder_family(c->model_family) && c->recompute != "none") {
    *error = "--recompute " + c->recompute + ": the " + c->model_family + " model keeps every activation (recompute "
             "is the dense GPT's)";
    return false;
  }
  c->graphs = f.get("graphs");
  c->stage_timing = f.has("stage-timing");
  if (c->stage_timing && c->graphs == "on") {
    *error = "--stage-timing with --graphs on: stage timing records an event between the stages of each step, "
             "which a graph's recording cannot hold (leave --graphs auto or set it off)";
    return false;
  }
  c->checkpoint_version = f.get("checkpoint-dtype") == "f32" ? 3 : 5;
  c->output_dir = f.has("output-dir") ? f.get("output-dir") : default_output_dir(c->model_family);
  if (c->output_dir.empty()) {
    *error = "--output-dir: empty (name a directory)";
    return false;
  }
  c->resume = f.get("resume");
  c->dry_run = f.has("dry-run");
  c->check_only = f.has("check");
  if (c->check_only && c->dry_run) {
    *error = "--check and --dry-run: give one (a check prints nothing, a dry run the plan)";
    return false;
  }
  c->json = f.has("json");
  return true;
}

}  // namespace

bool dense_gpt_family(const std::string& family) {
  return family == "gpt" || family == "gpt2" || family == "gpt3" || family == "nanogpt";
}

bool decoder_family(const std::string& family) { return family == "nanochat" || family == "llama"; }

float scheduled_lr(const TrainConfig& c, int step) {
  const float peak = static_cast<float>(c.learning_rate), floor = static_cast<float>(c.final_lr_fraction);
  if (c.warmdown_ratio > 0) return warmdown_learning_rate_at(step, c.max_steps, c.warmup_steps, c.warmdown_ratio, peak, floor);
  return learning_rate_at(step, c.max_steps, c.warmup_steps, peak, floor);
}

bool resolve_train_config(const Flags& f, TrainConfig* c, std::string* error) {
  bool recipe = false;
  return resolve_model(f, c, &recipe, error) && resolve_schedule(f, recipe, c, error) && resolve_run(f, c, error);
}

Json plan_json(const TrainConfig& c) {
  Json p = Json::object();
  p.set("model_family", c.model_family);
  p.set("template", c.template_name);
  const bool decoder = decoder_family(c.model_family);
  p.set("geometry", decoder ? decoder_geometry_json(c.decoder) : geometry_json(c.model));
  p.set("parameters", static_cast<uint64_t>(decoder ? decoder_num_parameters(c.decoder) : num_parameters(c.model)));
  Json batch = Json::object();
  batch.set("seq_len", c.seq_len);
  batch.set("batch_size", c.batch_size);
  batch.set("train_batch_tokens", static_cast<int64_t>(c.train_batch_tokens));
  batch.set("grad_accum_steps", c.grad_accum_steps);
  p.set("batch", batch);
  // The op library's block for the model's state and a micro-batch's activations, and the
  // activations' part of it, in GiB to 0.01, by the dtype trained in (bf16 on CUDA by default,
  // f32 on the CPU).
  GPTRecompute recompute;
  parse_recompute(c.recompute, &recompute);
  p.set("recompute", c.recompute);
  p.set("stage_timing", c.stage_timing);
  Json memory = Json::object(), activations = Json::object();
  for (nfn_dtype dtype : {NFN_BF16, NFN_F32}) {
    const size_t state =
        decoder ? Decoder::memory_bytes(c.decoder, dtype, 0, 0) : GPT::memory_bytes(c.model, dtype, 0, 0);
    const size_t total = decoder ? Decoder::memory_bytes(c.decoder, dtype, c.batch_size, c.seq_len)
                                 : GPT::memory_bytes(c.model, dtype, c.batch_size, c.seq_len, recompute);
    auto gib = [](size_t bytes) { return std::round(static_cast<double>(bytes) / (1 << 30) * 100) / 100; };
    memory.set(dtype == NFN_BF16 ? "bf16" : "f32", gib(total));
    activations.set(dtype == NFN_BF16 ? "bf16" : "f32", gib(total - state));
  }
  p.set("memory_gib", memory);
  p.set("activation_gib", activations);
  Json s = Json::object();
  s.set("max_steps", c.max_steps);
  s.set("learning_rate", c.learning_rate);
  s.set("warmup_steps", c.warmup_steps);
  s.set("final_lr_fraction", c.final_lr_fraction);
  if (c.warmdown_ratio > 0) {
    s.set("decay", "constant, then linear over the last warmdown_ratio of the steps to final_lr_fraction");
    s.set("warmdown_ratio", c.warmdown_ratio);
  } else {
    s.set("decay", c.final_lr_fraction == 0 ? "cosine to zero" : "cosine to final_lr_fraction of the peak");
  }
  if (c.model_family == "nanochat") {
    Json lrs = Json::object();  // the peaks; embeddings and head scaled by sqrt(768 / channels)
    lrs.set("matrix_muon", c.learning_rate);
    lrs.set("embedding", c.embedding_lr);
    lrs.set("unembedding", c.unembedding_lr);
    lrs.set("scalar", c.scalar_lr);
    s.set("learning_rates", lrs);
  }
  s.set("weight_decay", c.weight_decay);
  s.set("max_grad_norm", c.max_grad_norm);
  s.set("eval_every_steps", c.eval_every_steps);
  s.set("eval_batches", c.eval_batches);
  s.set("eval_batch_size", c.eval_batch_size);
  s.set("checkpoints", c.write_checkpoints);
  s.set("total_tokens", static_cast<int64_t>(c.train_batch_tokens * c.max_steps));
  p.set("schedule", s);
  Json data = Json::object();
  data.set("train", c.train_data);
  data.set("val", c.val_data);
  data.set("dataset_name", c.dataset_name);
  data.set("tokenizer", c.tokenizer);
  data.set("packing", c.packing);
  if (c.packing == "bestfit") data.set("packing_buffer", c.packing_buffer);
  p.set("data", data);
  Json lib = Json::object();
  lib.set("backend", c.backend);
  lib.set("tile_ops_lib", c.tile_ops_lib);
  p.set("op_library", lib);
  p.set("output_dir", c.output_dir);
  p.set("resume", c.resume);
  if (!c.init_from.empty()) {  // a warm start's checkpoint (only then: other plans stay as they were)
    Json init = Json::object();
    init.set("model_file", c.init_from);
    init.set("state_file", c.init_state.empty() ? Json() : Json(c.init_state));
    p.set("init_from", init);
  }
  p.set("seed", static_cast<int64_t>(c.seed));  // as --seed gave it (the manifest's too)
  return p;
}

}  // namespace nfn
