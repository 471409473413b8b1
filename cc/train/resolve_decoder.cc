#include "cc/train/resolve_decoder.h"

#include <cmath>

#include "cc/model/decoder.h"

namespace nfn {

namespace {

// nanochat's base_train: tokens a step, rows per micro-batch, tokens per scaling parameter.
constexpr int64_t kDepthBatchTokens = 524288;
constexpr int kDepthMicroBatch = 32;
constexpr double kTokensPerParameter = 20;

void read_int(const Flags& f, const char* name, int* out) {
  if (f.has(name)) *out = static_cast<int>(f.get_int(name));
}

// The CPU demo's sizes (256 context, 4 layers of 128 channels), or nanochat's --depth.
void base_geometry(const Flags& f, bool nano, DecoderConfig* d, std::string* template_name) {
  d->family = nano ? DecoderFamily::kNanochat : DecoderFamily::kLlama;
  d->num_layers = 4;
  d->channels = 128;
  d->num_heads = nano ? 2 : 4;
  d->max_seq_len = 256;
  d->rope_theta = nano ? 100000.f : 10000.f;
  d->window_pattern = nano ? "SSSL" : "L";
  *template_name = "tiny";
  if (f.has("depth")) {
    const int depth = static_cast<int>(f.get_int("depth"));
    d->num_layers = depth;
    d->channels = (64 * depth + 127) / 128 * 128;  // aspect ratio 64, heads of 128
    d->num_heads = d->channels / 128;
    d->max_seq_len = 2048;
    *template_name = "depth-" + std::to_string(depth);
  } else if (f.has("num-layers") || f.has("num-heads") || f.has("model-dim") || f.has("train-seq-len")) {
    *template_name = "custom";
    read_int(f, "train-seq-len", &d->max_seq_len);  // a custom model's context is the rows it trains on
  }
}

}  // namespace

bool resolve_decoder_model(const Flags& f, TrainConfig* c, bool* recipe, std::string* error) {
  const bool nano = c->model_family == "nanochat";
  if (!c->graph_file.empty()) {
    *error = "--graph-file: the " + c->model_family + " family takes its geometry from flags (--depth or --num-layers ...)";
    return false;
  }
  if (f.has("template-name")) {
    *error = "--template-name names GPT-2/3 geometries; the " + c->model_family + " family takes --depth or geometry flags";
    return false;
  }
  if (!nano && f.has("depth")) {
    *error = "--depth is nanochat's size knob; a llama takes --num-layers, --num-heads, --model-dim";
    return false;
  }
  if (f.has("depth") && (f.has("num-layers") || f.has("model-dim") || f.has("num-heads"))) {
    *error = "--depth derives the layers, width and heads; drop --num-layers/--model-dim/--num-heads";
    return false;
  }
  if (nano && f.has("tie-embeddings")) {
    *error = "--tie-embeddings: nanochat keeps its LM head apart from the embedding";
    return false;
  }
  DecoderConfig& d = c->decoder;
  base_geometry(f, nano, &d, &c->template_name);
  *recipe = f.has("depth");
  read_int(f, "num-layers", &d.num_layers);
  read_int(f, "num-heads", &d.num_heads);
  read_int(f, "model-dim", &d.channels);
  if (d.channels % d.num_heads != 0) {
    *error = "--model-dim " + std::to_string(d.channels) + " is not a multiple of --num-heads " +
             std::to_string(d.num_heads);
    return false;
  }
  d.head_dim = d.channels / d.num_heads;
  d.num_kv_heads = d.num_heads;
  read_int(f, "num-kv-heads", &d.num_kv_heads);
  d.hidden = nano ? 4 * d.channels : (8 * d.channels / 3 + 63) / 64 * 64;
  read_int(f, "mlp-hidden", &d.hidden);
  if (f.has("window-pattern")) d.window_pattern = f.get("window-pattern");
  if (f.has("rope-theta")) d.rope_theta = static_cast<float>(f.get_double("rope-theta"));
  d.tied_head = f.has("tie-embeddings");
  d.vocab_size = c->model.vocab_size;
  read_int(f, "vocab-size", &d.vocab_size);
  d.padded_vocab_size = nano ? pad_vocab_64(d.vocab_size) : d.vocab_size;
  const std::string bad = validate_decoder(d);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }
  // The shared fields, for what reads any family's context, vocabulary and size.
  c->model.max_seq_len = d.max_seq_len;
  c->model.vocab_size = d.vocab_size;
  c->model.padded_vocab_size = d.padded_vocab_size;
  c->model.num_layers = d.num_layers;
  c->model.num_heads = d.num_heads;
  c->model.channels = d.channels;
  return true;
}

void default_decoder_schedule(bool recipe, TrainConfig* c) {
  const bool nano = c->model_family == "nanochat";
  c->weight_decay = nano ? 0 : 0.1;
  c->warmdown_ratio = nano ? 0.4 : 0;
  c->warmup_steps = nano ? 0 : 50;
  c->learning_rate = nano ? 0.02 : 2e-3;
  c->max_grad_norm = nano ? 0 : 1.0;  // nanochat does not clip
  c->eval_every_steps = 250;
  if (recipe) {
    // Tokens 20x the scaling parameters (the blocks' matrices and the head), as nanochat sizes
    // a run from its parameter:data ratio.
    double scaling = 0;
    for (const DecoderTensor& t : decoder_layout(c->decoder))
      if (t.role() == TensorRole::kMatrix || t.role() == TensorRole::kHead) scaling += static_cast<double>(t.count());
    c->batch_size = kDepthMicroBatch;
    c->train_batch_tokens = kDepthBatchTokens;
    c->max_steps = static_cast<int>(std::ceil(kTokensPerParameter * scaling / kDepthBatchTokens));
    c->eval_batches = 20;
    return;
  }
  c->batch_size = 16;
  c->train_batch_tokens = 0;
  c->max_steps = 1000;
  c->eval_batches = 16;
}

}  // namespace nfn
