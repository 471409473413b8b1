#include "cc/model/decoder.h"

#include <algorithm>
#include <cmath>

#include "cc/ops/arena.h"
#include "cc/model/token_upload.h"
#include "cc/ops/op_error.h"
#include "cc/util/quant.h"
#include "cc/util/rng.h"

namespace nfn {

namespace {

constexpr float kAdamEps = 1e-10f;

// Sizes of one micro-batch's tensors.
struct Dims {
  size_t N, C, QD, KD, QKV, H, Hf, V, Vp, L, NH, NKV, HD;
  Dims(const DecoderConfig& c, int B, int T)
      : N(static_cast<size_t>(B) * T), C(c.channels), QD(static_cast<size_t>(c.num_heads) * c.head_dim),
        KD(static_cast<size_t>(c.num_kv_heads) * c.head_dim), QKV(QD + 2 * KD), H(c.hidden),
        Hf(c.nanochat() ? c.hidden : 2 * static_cast<size_t>(c.hidden)), V(c.vocab_size),
        Vp(c.padded_vocab_size), L(c.num_layers), NH(c.num_heads), NKV(c.num_kv_heads), HD(c.head_dim) {}
};

}  // namespace

// Activations of one micro-batch (per-layer tensors are L consecutive slices) and scratch.
struct Decoder::Acts {
  int32_t *inputs, *targets;  // (N)
  uint16_t* window;           // (N+1)
  float* losses;              // (N)
  void* emb;                  // (N,C) the token embedding
  float* emb_rstd;            // (N)    nanochat: its norm
  void *emb_n, *x0;           // (N,C)  nanochat: normed, then smeared (x0)
  void* xm;                   // (L,N,C) nanochat: each block's input, r_l x + x0_l x0
  void* h1;                   // (L,N,C) attention norm
  float* rstd1;               // (L,N)
  void* qkv;                  // (L,N,QKV) after rotary and QK-norm
  float* qk_rstd;             // (L,N,NH+NKV) nanochat
  void* atty;                 // (L,N,QD)
  float* lse;                 // (L,N*NH)
  void *res2, *h2;            // (L,N,C)
  float* rstd2;               // (L,N)
  void *fc, *act;             // (L,N,Hf), (L,N,H)
  void* res3;                 // (L,N,C) each layer's output
  void* xb;                   // (N,C) nanochat: after the backout
  void* lnf;                  // (N,C)
  float* rstdf;               // (N)
  void* ve;                   // (N,KD) a layer's value-embedding rows
  void *dres, *dln, *dx0, *dmid;  // (N,C)
  void *dbig, *dhid, *datt, *dve;  // (N,max(Hf,QKV)), (N,H), (N,QD), (N,KD)
  void* lora_us;                   // (L,4,N,rank) LoRA: each adapter's scale x A^T
  void* lora_du;                   // (N,rank)
};

struct Decoder::Layer {
  const void* input;  // the layer's input: x0 / the embedding, or res3 of the layer before
  const void* block_in;  // what the block adds onto: xm (nanochat) or the input
  void *xm, *h1, *qkv, *atty, *res2, *h2, *fc, *act, *res3;
  float *rstd1, *qk_rstd, *lse, *rstd2;
};

Decoder::~Decoder() { release(); }

void Decoder::release() {
  if (ops_ != nullptr) {
    if (act_block_) ops_->free(ctx_, act_block_);
    if (block_) ops_->free(ctx_, block_);
  }
  act_block_ = block_ = nullptr;
  delete acts_;
  acts_ = nullptr;
  have_inputs_ = have_targets_ = false;
  base_.release();
}

bool Decoder::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = op_error(*ops_, ctx_, what);
  return false;
}

std::vector<ArenaSlot> Decoder::activation_plan(const DecoderConfig& c, const LoraSpec& lora, int B, int T, size_t e,
                                                Acts* a) {
  const Dims d(c, B, T);
  const bool nano = c.nanochat();
  const size_t N = d.N, C = d.C, L = d.L, f = 4;
  auto slot = [](auto** p, size_t bytes) { return ArenaSlot{reinterpret_cast<void**>(p), bytes}; };
  return {
      slot(&a->inputs, N * 4),
      slot(&a->targets, N * 4),
      slot(&a->window, (N + 1) * 2),
      slot(&a->losses, N * f),
      slot(&a->emb, N * C * e),
      slot(&a->emb_rstd, nano ? N * f : 0),
      slot(&a->emb_n, nano ? N * C * e : 0),
      slot(&a->x0, nano ? N * C * e : 0),
      slot(&a->xm, nano ? L * N * C * e : 0),
      slot(&a->h1, L * N * C * e),
      slot(&a->rstd1, L * N * f),
      slot(&a->qkv, L * N * d.QKV * e),
      slot(&a->qk_rstd, nano ? L * N * (d.NH + d.NKV) * f : 0),
      slot(&a->atty, L * N * d.QD * e),
      slot(&a->lse, L * N * d.NH * f),
      slot(&a->res2, L * N * C * e),
      slot(&a->h2, L * N * C * e),
      slot(&a->rstd2, L * N * f),
      slot(&a->fc, L * N * d.Hf * e),
      slot(&a->act, L * N * d.H * e),
      slot(&a->res3, L * N * C * e),
      slot(&a->xb, nano ? N * C * e : 0),
      slot(&a->lnf, N * C * e),
      slot(&a->rstdf, N * f),
      slot(&a->ve, nano ? N * d.KD * e : 0),
      slot(&a->dres, N * C * e),
      slot(&a->dln, N * C * e),
      slot(&a->dx0, nano ? N * C * e : 0),
      slot(&a->dmid, nano ? N * C * e : 0),
      slot(&a->dbig, N * std::max(d.Hf, d.QKV) * e),
      slot(&a->dhid, N * d.H * e),
      slot(&a->datt, N * d.QD * e),
      slot(&a->dve, nano ? N * d.KD * e : 0),
      slot(&a->lora_us, L * kLoraMatrices * N * lora.rank * e),
      slot(&a->lora_du, N * lora.rank * e),
  };
}

size_t Decoder::memory_bytes(const DecoderConfig& config, nfn_dtype dtype, int B, int T, const LoraSpec& lora) {
  const size_t e = dtype == NFN_F32 ? 4 : 2;
  ParamState state;
  state.bind(nullptr, nullptr, dtype, lora.on() ? lora_num_parameters(config, lora) : decoder_num_parameters(config));
  size_t bytes = arena_bytes(state.plan());
  if (lora.on()) {  // the base: its block matrices quantized or in the op dtype, the rest in the op dtype
    size_t in_matrices = 0, quantized = 0;
    for (const DecoderOffsets::Layer& w : decoder_offsets(config).layers)
      for (const DecoderMatrix& m : layer_matrices(config, w)) {
        const size_t n = static_cast<size_t>(m.rows) * m.cols;
        if (lora.quant < 0 || m.cols % quant::kBlock != 0) continue;
        in_matrices += n;
        quantized += quant::bytes_of(lora.quant, n);
      }
    bytes += (decoder_num_parameters(config) - in_matrices) * e + quantized;
  }
  Acts acts;
  if (B > 0 && T > 0) bytes += arena_bytes(activation_plan(config, lora, B, T, e, &acts));
  return bytes;
}

double Decoder::flops_per_token(const DecoderConfig& c, int T) {
  double matmul = 0;
  for (const DecoderTensor& t : decoder_layout(c))
    if (t.role() == TensorRole::kMatrix || t.role() == TensorRole::kHead || (c.tied_head && t.role() == TensorRole::kEmbedding))
      matmul += static_cast<double>(t.count());
  double attention = 0;
  for (int w : layer_windows(c)) attention += 12.0 * c.num_heads * c.head_dim * (w > 0 ? std::min(w + 1, T) : T);
  return 6 * matmul + attention;
}

bool Decoder::init(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& config, nfn_dtype dtype,
                   const DecoderRecipe& recipe, std::string* error, int B, int T) {
  release();
  const std::string bad = validate_decoder(config);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }
  ops_ = ops;
  ctx_ = ctx;
  config_ = config;
  recipe_ = recipe;
  dtype_ = dtype;
  windows_ = layer_windows(config);
  off_ = decoder_offsets(config);
  if (recipe.lora.on()) {
    const std::string why = validate_lora(recipe.lora);
    if (!why.empty()) {
      *error = why;
      return false;
    }
    recipe_.muon = false;  // the adapters train with AdamW
    layout_ = lora_layout(config, recipe.lora);
    lora_at_ = lora_targets(config, recipe.lora);
  } else {
    layout_ = decoder_layout(config);
    lora_at_.clear();
  }
  state_.bind(ops, ctx, dtype, layout_.back().offset + layout_.back().count());
  std::vector<ArenaSlot> plan = state_.plan();
  if (B > 0 && T > 0) {
    if (T > config.max_seq_len) {
      *error = "sequence length " + std::to_string(T) + " exceeds the model's context " +
               std::to_string(config.max_seq_len);
      return false;
    }
    acts_ = new Acts();
    const std::vector<ArenaSlot> acts = activation_plan(config, recipe_.lora, B, T, state_.esize(), acts_);
    plan.insert(plan.end(), acts.begin(), acts.end());
  }
  if (!alloc_arena(*ops_, ctx_, plan, "allocating the decoder", &block_, error)) return false;
  if (B > 0 && T > 0) {
    B_ = B;
    T_ = T;
    ++activations_version_;
  }
  return state_.ready(error);
}

bool Decoder::ensure_activations(int B, int T, std::string* error) {
  if (B == B_ && T == T_ && acts_ != nullptr) return true;
  if (T > config_.max_seq_len) {
    *error = "sequence length " + std::to_string(T) + " exceeds the model's context " +
             std::to_string(config_.max_seq_len);
    return false;
  }
  release_activations();
  acts_ = new Acts();
  const std::string what = "allocating the activations of micro-batch " + std::to_string(B) + " x " + std::to_string(T);
  if (!alloc_arena(*ops_, ctx_, activation_plan(config_, recipe_.lora, B, T, state_.esize(), acts_), what, &act_block_,
                   error)) {
    delete acts_;
    acts_ = nullptr;
    return false;
  }
  B_ = B;
  T_ = T;
  return true;
}

void Decoder::release_activations() {
  if (act_block_) ops_->free(ctx_, act_block_);
  act_block_ = nullptr;
  delete acts_;
  acts_ = nullptr;
  B_ = T_ = 0;
  have_inputs_ = have_targets_ = false;
  ++activations_version_;
}

namespace {

void fill_uniform(float* t, size_t n, float lo, float hi, Rng* rng) {
  for (size_t k = 0; k < n; ++k) t[k] = lo + (hi - lo) * rng->uniform();
}
void fill_normal(float* t, size_t n, float std, Rng* rng) {
  for (size_t k = 0; k < n; ++k) t[k] = std * rng->normal();
}

}  // namespace

std::vector<float> Decoder::random_parameters(const DecoderConfig& c, uint64_t seed) {
  std::vector<float> w(decoder_num_parameters(c), 0.f);
  Rng rng(seed);
  const float s = std::sqrt(3.f / c.channels);  // uniform bound with the std of N(0, 1/C)
  const float L1 = std::max(c.num_layers - 1, 1);
  for (const DecoderTensor& t : decoder_layout(c)) {
    float* x = w.data() + t.offset;
    // Padding rows of the vocabulary stay 0.
    const size_t rows = (t.role() == TensorRole::kEmbedding || t.role() == TensorRole::kHead ||
                         t.role() == TensorRole::kValueEmbedding)
                            ? std::min<size_t>(t.rows, c.vocab_size)
                            : t.rows;
    const size_t n = rows * t.cols;
    if (!c.nanochat()) {
      if (t.role() == TensorRole::kNormWeight)
        std::fill(x, x + n, 1.f);
      else
        fill_normal(x, n, 0.02f, &rng);
      continue;
    }
    switch (t.slot) {
      case TensorSlot::kEmbedding: fill_normal(x, n, 0.8f, &rng); break;
      case TensorSlot::kHead: fill_normal(x, n, 0.001f, &rng); break;
      case TensorSlot::kResidLambdas:
        for (int i = 0; i < c.num_layers; ++i) x[i] = 1.15f - 0.10f * i / L1;
        break;
      case TensorSlot::kX0Lambdas:
        for (int i = 0; i < c.num_layers; ++i) x[i] = 0.20f - 0.15f * i / L1;
        break;
      case TensorSlot::kSmearGate:
      case TensorSlot::kValueGate: fill_uniform(x, n, 0.f, 0.02f, &rng); break;
      case TensorSlot::kBackout: x[0] = 0.2f; break;
      case TensorSlot::kQ:
      case TensorSlot::kK:
      case TensorSlot::kV:
      case TensorSlot::kValueTable: fill_uniform(x, n, -s, s, &rng); break;
      case TensorSlot::kUp: fill_uniform(x, n, -0.4f * s, 0.4f * s, &rng); break;
      default: break;  // the output projections and smear_lambda stay 0
    }
  }
  return w;
}

bool Decoder::set_parameters(const std::vector<float>& host, std::string* error) {
  if (host.size() != state_.size()) {
    *error = "parameters: got " + std::to_string(host.size()) + " values, the model has " +
             std::to_string(state_.size());
    return false;
  }
  return upload(Stored::kMaster, 0, host.size(), host.data(), error);
}

bool Decoder::set_base(const std::vector<float>& host, std::string* error) {
  if (!lora()) {
    *error = "set_base: the model has no LoRA adapters (its parameters are the whole model)";
    return false;
  }
  if (host.size() != decoder_num_parameters(config_)) {
    *error = "base parameters: got " + std::to_string(host.size()) + " values, the model has " +
             std::to_string(decoder_num_parameters(config_));
    return false;
  }
  return base_.upload(ops_, ctx_, config_, host, dtype_, recipe_.lora.quant, error);
}

bool Decoder::lora_forward_at(int l, int k, void* y, const void* x, std::string* error) {
  if (!lora()) return true;
  const LoraTarget& t = lora_at_[l][k];
  if (!t.on) return true;
  const int N = B_ * T_, r = recipe_.lora.rank;
  void* us = static_cast<char*>(acts_->lora_us) + ((static_cast<size_t>(l) * kLoraMatrices + k) * N * r) * state_.esize();
  return check(lora_forward(*ops_, ctx_, y, us, x, state_.param(t.a), state_.param(t.b), N, t.in, t.out, r,
                            recipe_.lora.scale(), dtype_), "LoRA forward", error);
}

bool Decoder::lora_backward_at(int l, int k, void* dx, const void* dy, const void* x, std::string* error) {
  if (!lora()) return true;
  const LoraTarget& t = lora_at_[l][k];
  if (!t.on) return true;
  const int N = B_ * T_, r = recipe_.lora.rank;
  const void* us =
      static_cast<char*>(acts_->lora_us) + ((static_cast<size_t>(l) * kLoraMatrices + k) * N * r) * state_.esize();
  return check(lora_backward(*ops_, ctx_, dx, state_.grad(t.a), state_.grad(t.b), acts_->lora_du, dy, x, us,
                             state_.param(t.a), state_.param(t.b), N, t.in, t.out, r, recipe_.lora.scale(), dtype_),
               "LoRA backward", error);
}

bool Decoder::get_parameters(std::vector<float>* host, std::string* error) {
  host->resize(state_.size());
  return download(Stored::kMaster, 0, host->size(), host->data(), error);
}

bool Decoder::upload_window_u16(const uint16_t* window, int B, int T, std::string* error) {
  if (!ensure_activations(B, T, error)) return false;
  have_inputs_ = have_targets_ = upload_token_window(*ops_, ctx_, acts_->window, acts_->inputs, acts_->targets, window,
                                                     static_cast<size_t>(B) * T, error);
  return have_inputs_;
}

bool Decoder::upload_tokens(const int32_t* inputs, const int32_t* targets, int B, int T, std::string* error) {
  return ensure_activations(B, T, error) && upload_token_ids(*ops_, ctx_, acts_->inputs, acts_->targets, inputs, targets,
                                                             static_cast<size_t>(B) * T, &have_inputs_,
                                                             &have_targets_, error);
}

Decoder::Layer Decoder::layer(int l) const {
  const Acts& a = *acts_;
  const Dims d(config_, B_, T_);
  const size_t e = state_.esize(), NC = d.N * d.C;
  auto at = [&](void* base, size_t per) -> void* { return static_cast<char*>(base) + l * per * e; };
  Layer x;
  if (l > 0)
    x.input = static_cast<char*>(a.res3) + (l - 1) * NC * e;
  else
    x.input = config_.nanochat() ? a.x0 : a.emb;
  x.xm = config_.nanochat() ? at(a.xm, NC) : nullptr;
  x.block_in = config_.nanochat() ? x.xm : x.input;
  x.h1 = at(a.h1, NC);
  x.qkv = at(a.qkv, d.N * d.QKV);
  x.atty = at(a.atty, d.N * d.QD);
  x.res2 = at(a.res2, NC);
  x.h2 = at(a.h2, NC);
  x.fc = at(a.fc, d.N * d.Hf);
  x.act = at(a.act, d.N * d.H);
  x.res3 = at(a.res3, NC);
  x.rstd1 = a.rstd1 + l * d.N;
  x.rstd2 = a.rstd2 + l * d.N;
  x.qk_rstd = config_.nanochat() ? a.qk_rstd + l * d.N * (d.NH + d.NKV) : nullptr;
  x.lse = a.lse + l * d.N * d.NH;
  return x;
}

// The token embedding; nanochat's is normed, and smeared: x0[t] = e[t] + lam sigmoid(e[t,:24]
// . w) e[t-1] within each row.
bool Decoder::embed(std::string* error) {
  const Dims d(config_, B_, T_);
  const int B = B_, T = T_, N = B * T, C = config_.channels;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  if (!check(o.embedding_forward(ctx_, a.emb, a.inputs, p(off_.wte), nullptr, B, T, C, dtype_), "embedding_forward",
             error))
    return false;
  if (!config_.nanochat()) return true;
  return check(o.rmsnorm_forward(ctx_, a.emb_n, a.emb_rstd, a.emb, nullptr, N, C, config_.norm_eps, dtype_),
               "rmsnorm_forward (embedding)", error) &&
         check(o.copy(ctx_, a.x0, a.emb_n, d.N * d.C * state_.esize(), NFN_DEVICE_TO_DEVICE), "copy", error) &&
         check(o.gated_add_forward(ctx_, a.x0, a.emb_n, p(off_.smear_gate), p(off_.smear_lambda), a.emb_n, N, T, 1, C,
                                   kSmearGateChannels, 1, C, C, C, 1.f, dtype_), "gated_add_forward (smear)", error);
}

bool Decoder::layer_forward(int l, const void* input, std::string* error) {
  const Dims d(config_, B_, T_);
  const int B = B_, T = T_, N = B * T, C = config_.channels, NH = config_.num_heads, NKV = config_.num_kv_heads,
            HD = config_.head_dim, QKV = static_cast<int>(d.QKV), QD = static_cast<int>(d.QD),
            H = config_.hidden, Hf = static_cast<int>(d.Hf);
  const bool nano = config_.nanochat();
  const nfn_op_table& o = *ops_;
  const DecoderOffsets::Layer& w = off_.layers[l];
  const Layer x = layer(l);
  Acts& a = *acts_;
  if (nano && !check(o.scaled_sum_forward(ctx_, x.xm, input, a.x0, p(off_.resid + l), p(off_.x0l + l), 1.f, 1.f,
                                          d.N * d.C, dtype_), "scaled_sum_forward (lambdas)", error))
    return false;
  const float eps = config_.norm_eps;
  const void* wm = nullptr;  // each base matrix as its GEMM reads it
  if (!check(o.rmsnorm_forward(ctx_, x.h1, x.rstd1, x.block_in, nano ? nullptr : p(w.attn_norm), N, C, eps, dtype_),
             "rmsnorm_forward (attention)", error) ||
      !(wm = W(w.qkv, error)) ||
      !check(o.linear_forward(ctx_, x.qkv, nullptr, x.h1, wm, nullptr, nullptr, N, C, QKV, NFN_EPILOGUE_NONE,
                              dtype_), "linear_forward (qkv)", error) ||
      !lora_forward_at(l, kLoraQkv, x.qkv, x.h1, error))
    return false;
  if (w.has_ve) {
    void* v = static_cast<char*>(x.qkv) + (d.QD + d.KD) * state_.esize();
    if (!check(o.embedding_forward(ctx_, a.ve, a.inputs, p(w.ve_table), nullptr, B, T, static_cast<int>(d.KD),
                                   dtype_), "embedding_forward (value embedding)", error) ||
        !check(o.gated_add_forward(ctx_, v, x.h1, p(w.ve_gate), nullptr, a.ve, N, T, NKV, HD, kValueGateChannels, 0,
                                   QKV, C, static_cast<int>(d.KD), kValueGateScale, dtype_),
               "gated_add_forward (value embedding)", error))
      return false;
  }
  const int sign = nano ? -1 : 1;
  if (!check(o.rope_forward(ctx_, x.qkv, x.qkv, N, T, 0, QKV, NH, NKV, HD, config_.rope_theta, sign, dtype_),
             "rope_forward", error) ||
      (nano && !check(o.head_rmsnorm_forward(ctx_, x.qkv, x.qk_rstd, x.qkv, N, NH + NKV, HD, QKV, kQkNormScale, eps,
                                             dtype_), "head_rmsnorm_forward (QK-norm)", error)) ||
      !check(o.attention_forward(ctx_, x.atty, x.lse, x.qkv, B, T, NH, NKV, HD, windows_[l], dtype_),
             "attention_forward", error) ||
      !(wm = W(w.o, error)) ||
      !check(o.linear_forward(ctx_, x.res2, nullptr, x.atty, wm, nullptr, x.block_in, N, QD, C,
                              NFN_EPILOGUE_NONE, dtype_), "linear_forward (attention output)", error) ||
      !lora_forward_at(l, kLoraOut, x.res2, x.atty, error))
    return false;
  mark(Stage::kAttentionForward, l);
  if (!check(o.rmsnorm_forward(ctx_, x.h2, x.rstd2, x.res2, nano ? nullptr : p(w.mlp_norm), N, C, eps, dtype_),
             "rmsnorm_forward (mlp)", error) ||
      !(wm = W(w.fc, error)) ||
      !check(o.linear_forward(ctx_, x.fc, nullptr, x.h2, wm, nullptr, nullptr, N, C, Hf, NFN_EPILOGUE_NONE,
                              dtype_), "linear_forward (mlp up)", error) ||
      !lora_forward_at(l, kLoraUp, x.fc, x.h2, error))
    return false;
  const bool activated = nano ? check(o.relu_squared_forward(ctx_, x.act, x.fc, d.N * d.H, dtype_),
                                      "relu_squared_forward", error)
                              : check(o.swiglu_forward(ctx_, x.act, x.fc, N, H, dtype_), "swiglu_forward", error);
  if (!activated ||
      !(wm = W(w.proj, error)) ||
      !check(o.linear_forward(ctx_, x.res3, nullptr, x.act, wm, nullptr, x.res2, N, H, C, NFN_EPILOGUE_NONE,
                              dtype_), "linear_forward (mlp down)", error) ||
      !lora_forward_at(l, kLoraDown, x.res3, x.act, error))
    return false;
  mark(Stage::kMlpForward, l);
  return true;
}

// Embedding, blocks and the final norm (after nanochat's backout, x - lam x_mid) into lnf.
bool Decoder::forward(std::string* error) {
  const Dims d(config_, B_, T_);
  const int N = B_ * T_, C = config_.channels, L = config_.num_layers;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  if (!embed(error)) return false;
  mark(Stage::kEmbedding);
  for (int l = 0; l < L; ++l)
    if (!layer_forward(l, layer(l).input, error)) return false;
  const void* last = layer(L - 1).res3;
  if (config_.nanochat()) {
    if (!check(o.scaled_sum_forward(ctx_, a.xb, last, layer(L / 2).res3, nullptr, p(off_.backout), 1.f, -1.f, d.N * d.C,
                                    dtype_), "scaled_sum_forward (backout)", error))
      return false;
    last = a.xb;
  }
  return check(o.rmsnorm_forward(ctx_, a.lnf, a.rstdf, last, config_.nanochat() ? nullptr : p(off_.final_norm), N, C,
                                 config_.norm_eps, dtype_), "rmsnorm_forward (final)", error);
}

// The LM head's loss, fused with the first step of the backward (the gradient of the normed
// output into dln).
bool Decoder::head_forward(bool backward, float grad_scale, std::string* error) {
  const int N = B_ * T_, C = config_.channels;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  if (!check(o.lm_head_cross_entropy(ctx_, a.losses, state_.loss_sum(), backward ? a.dln : nullptr,
                                     backward ? g(off_.head) : nullptr, a.lnf, p(off_.head), a.targets, N, C,
                                     config_.vocab_size, config_.padded_vocab_size, grad_scale,
                                     config_.nanochat() ? kLogitSoftcap : 0.f, dtype_),
             "lm_head_cross_entropy", error))
    return false;
  mark(Stage::kLmHead);
  return true;
}

bool Decoder::step_forward_backward(bool backward, float grad_scale, std::string* error) {
  if (acts_ == nullptr || !have_targets_) {
    *error = "forward: no tokens with targets uploaded";
    return false;
  }
  if (lora() && base_.bytes() == 0) {
    *error = "forward: the LoRA model has no base weights yet (set_base)";
    return false;
  }
  return forward(error) && head_forward(backward, grad_scale, error) && (!backward || this->backward(error));
}

// MLP: res3 = res2 + proj(act(fc(norm(res2)))); dres holds d res3 and leaves with d res2.
bool Decoder::mlp_backward(int l, const Layer& x, std::string* error) {
  const Dims d(config_, B_, T_);
  const int N = B_ * T_, C = config_.channels, H = config_.hidden, Hf = static_cast<int>(d.Hf);
  const bool nano = config_.nanochat();
  const nfn_op_table& o = *ops_;
  const DecoderOffsets::Layer& w = off_.layers[l];
  Acts& a = *acts_;
  const void* wm = nullptr;
  if (!(wm = W(w.proj, error)) ||
      !check(o.linear_backward(ctx_, a.dhid, g(w.proj), nullptr, nullptr, a.dres, x.act, wm, nullptr, N, H, C, 0,
                               dtype_), "linear_backward (mlp down)", error) ||
      !lora_backward_at(l, kLoraDown, a.dhid, a.dres, x.act, error))
    return false;
  const bool ok = nano ? check(o.relu_squared_backward(ctx_, a.dbig, x.fc, a.dhid, d.N * d.H, dtype_),
                               "relu_squared_backward", error)
                       : check(o.swiglu_backward(ctx_, a.dbig, x.fc, a.dhid, N, H, dtype_), "swiglu_backward", error);
  return ok && (wm = W(w.fc, error)) &&
         check(o.linear_backward(ctx_, a.dln, g(w.fc), nullptr, nullptr, a.dbig, x.h2, wm, nullptr, N, C, Hf, 0,
                                 dtype_), "linear_backward (mlp up)", error) &&
         lora_backward_at(l, kLoraUp, a.dln, a.dbig, x.h2, error) &&
         check(o.rmsnorm_backward(ctx_, a.dres, nano ? nullptr : g(w.mlp_norm), a.dln, x.res2,
                                  nano ? nullptr : p(w.mlp_norm), x.rstd2, N, C, dtype_),
               "rmsnorm_backward (mlp)", error);
}

// Attention: res2 = block_in + o(attention(qk_norm(rope(qkv(norm(block_in)) [+ gated ve])))).
// dres holds d res2 and leaves with d block_in.
bool Decoder::attention_backward(int l, const Layer& x, std::string* error) {
  const Dims d(config_, B_, T_);
  const int B = B_, T = T_, N = B * T, C = config_.channels, NH = config_.num_heads, NKV = config_.num_kv_heads,
            HD = config_.head_dim, QKV = static_cast<int>(d.QKV), QD = static_cast<int>(d.QD),
            KD = static_cast<int>(d.KD);
  const bool nano = config_.nanochat();
  const nfn_op_table& o = *ops_;
  const DecoderOffsets::Layer& w = off_.layers[l];
  Acts& a = *acts_;
  const void* wm = nullptr;
  if (!(wm = W(w.o, error)) ||
      !check(o.linear_backward(ctx_, a.datt, g(w.o), nullptr, nullptr, a.dres, x.atty, wm, nullptr, N, QD, C, 0,
                               dtype_), "linear_backward (attention output)", error) ||
      !lora_backward_at(l, kLoraOut, a.datt, a.dres, x.atty, error) ||
      !check(o.attention_backward(ctx_, a.dbig, a.datt, x.qkv, x.atty, x.lse, B, T, NH, NKV, HD, windows_[l], dtype_),
             "attention_backward", error) ||
      (nano && !check(o.head_rmsnorm_backward(ctx_, a.dbig, a.dbig, x.qkv, x.qk_rstd, N, NH + NKV, HD, QKV,
                                              kQkNormScale, dtype_), "head_rmsnorm_backward (QK-norm)", error)) ||
      !check(o.rope_backward(ctx_, a.dbig, a.dbig, N, T, 0, QKV, NH, NKV, HD, config_.rope_theta, nano ? -1 : 1,
                             dtype_), "rope_backward", error) ||
      !(wm = W(w.qkv, error)) ||
      !check(o.linear_backward(ctx_, a.dln, g(w.qkv), nullptr, nullptr, a.dbig, x.h1, wm, nullptr, N, C, QKV, 0,
                               dtype_), "linear_backward (qkv)", error) ||
      !lora_backward_at(l, kLoraQkv, a.dln, a.dbig, x.h1, error))
    return false;
  if (w.has_ve && lora()) {  // the gate's input gradient only: the base does not train
    const void* dv = static_cast<char*>(a.dbig) + (d.QD + d.KD) * state_.esize();
    if (!check(o.embedding_forward(ctx_, a.ve, a.inputs, p(w.ve_table), nullptr, B, T, KD, dtype_),
               "embedding_forward (value embedding)", error) ||
        !check(o.gated_add_backward(ctx_, a.dln, nullptr, nullptr, nullptr, dv, x.h1, p(w.ve_gate), nullptr, a.ve, N,
                                    T, NKV, HD, kValueGateChannels, 0, QKV, C, KD, kValueGateScale, dtype_),
               "gated_add_backward (value embedding)", error))
      return false;
  } else if (w.has_ve) {
    const void* dv = static_cast<char*>(a.dbig) + (d.QD + d.KD) * state_.esize();
    if (!check(o.embedding_forward(ctx_, a.ve, a.inputs, p(w.ve_table), nullptr, B, T, KD, dtype_),
               "embedding_forward (value embedding)", error) ||
        !check(o.fill(ctx_, a.dve, dtype_, 0.f, d.N * d.KD), "fill", error) ||
        !check(o.gated_add_backward(ctx_, a.dln, g(w.ve_gate), nullptr, a.dve, dv, x.h1, p(w.ve_gate), nullptr, a.ve,
                                    N, T, NKV, HD, kValueGateChannels, 0, QKV, C, KD, kValueGateScale, dtype_),
               "gated_add_backward (value embedding)", error) ||
        !check(o.embedding_backward(ctx_, g(w.ve_table), nullptr, a.dve, a.inputs, B, T, KD, dtype_),
               "embedding_backward (value embedding)", error))
      return false;
  }
  return check(o.rmsnorm_backward(ctx_, a.dres, nano ? nullptr : g(w.attn_norm), a.dln, x.block_in,
                                  nano ? nullptr : p(w.attn_norm), x.rstd1, N, C, dtype_),
               "rmsnorm_backward (attention)", error);
}

// From d x0 (in dres) to the embedding: the smear, the norm, the lookup.
bool Decoder::embed_backward(std::string* error) {
  const Dims d(config_, B_, T_);
  const int B = B_, T = T_, N = B * T, C = config_.channels;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  if (!config_.nanochat())
    return check(o.embedding_backward(ctx_, g(off_.wte), nullptr, a.dres, a.inputs, B, T, C, dtype_),
                 "embedding_backward", error);
  const size_t NC = d.N * d.C;
  // x0 = e + gated(e): d e = d x0 + the gated term's gradients (through the gate's input and
  // through the shifted rows), gathered apart and then added, as the op's outputs must not
  // overlap its dout.
  return check(o.fill(ctx_, a.dx0, dtype_, 0.f, NC), "fill", error) &&
         check(o.fill(ctx_, a.dln, dtype_, 0.f, NC), "fill", error) &&
         check(o.gated_add_backward(ctx_, a.dln, g(off_.smear_gate), g(off_.smear_lambda), a.dx0, a.dres, a.emb_n,
                                    p(off_.smear_gate), p(off_.smear_lambda), a.emb_n, N, T, 1, C, kSmearGateChannels, 1, C,
                                    C, C, 1.f, dtype_), "gated_add_backward (smear)", error) &&
         check(o.residual_forward(ctx_, a.dres, a.dres, a.dx0, nullptr, N, C, dtype_), "residual_forward", error) &&
         check(o.residual_forward(ctx_, a.dres, a.dres, a.dln, nullptr, N, C, dtype_), "residual_forward", error) &&
         check(o.fill(ctx_, a.dln, dtype_, 0.f, NC), "fill", error) &&
         check(o.rmsnorm_backward(ctx_, a.dln, nullptr, a.dres, a.emb, nullptr, a.emb_rstd, N, C, dtype_),
               "rmsnorm_backward (embedding)", error) &&
         check(o.embedding_backward(ctx_, g(off_.wte), nullptr, a.dln, a.inputs, B, T, C, dtype_), "embedding_backward",
               error);
}

bool Decoder::backward(std::string* error) {
  const Dims d(config_, B_, T_);
  const int N = B_ * T_, C = config_.channels, L = config_.num_layers, mid = L / 2;
  const size_t NC = d.N * d.C;
  const bool nano = config_.nanochat();
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  const void* last = nano ? a.xb : layer(L - 1).res3;
  // dln holds d lnf; the residual stream's gradient gathers in dres.
  if (!check(o.fill(ctx_, a.dres, dtype_, 0.f, NC), "fill", error) ||
      !check(o.rmsnorm_backward(ctx_, a.dres, nano ? nullptr : g(off_.final_norm), a.dln, last,
                                nano ? nullptr : p(off_.final_norm), a.rstdf, N, C, dtype_),
             "rmsnorm_backward (final)", error))
    return false;
  // The backout's share of the middle layer's output waits in dmid; d x0 gathers in dx0.
  if (nano && (!check(o.fill(ctx_, a.dmid, dtype_, 0.f, NC), "fill", error) ||
               !check(o.fill(ctx_, a.dx0, dtype_, 0.f, NC), "fill", error) ||
               !check(o.scaled_sum_backward(ctx_, nullptr, a.dmid, nullptr, g(off_.backout), a.dres, nullptr,
                                            layer(mid).res3, nullptr, p(off_.backout), 1.f, -1.f, NC, dtype_),
                      "scaled_sum_backward (backout)", error)))
    return false;
  mark(Stage::kLmHead);
  for (int l = L - 1; l >= 0; --l) {
    const Layer x = layer(l);
    if (nano && l == mid &&
        !check(o.residual_forward(ctx_, a.dres, a.dres, a.dmid, nullptr, N, C, dtype_), "residual_forward", error))
      return false;
    if (!mlp_backward(l, x, error)) return false;
    mark(Stage::kMlpBackward, l);
    if (!attention_backward(l, x, error)) return false;
    if (nano && !check(o.scaled_sum_backward(ctx_, a.dres, a.dx0, g(off_.resid + l), g(off_.x0l + l), a.dres, x.input, a.x0,
                                             p(off_.resid + l), p(off_.x0l + l), 1.f, 1.f, NC, dtype_),
                       "scaled_sum_backward (lambdas)", error))
      return false;
    mark(Stage::kAttentionBackward, l);
  }
  if (lora()) return true;  // nothing below the blocks trains
  if (nano && !check(o.residual_forward(ctx_, a.dres, a.dres, a.dx0, nullptr, N, C, dtype_), "residual_forward", error))
    return false;
  if (!embed_backward(error)) return false;
  mark(Stage::kEmbedding);
  return true;
}

// AdamW over tensors of one kind of group: lr, betas and decay per group as nanochat's
// MuonAdamW sets them (embeddings and head scaled by 1/sqrt(C/768)), or every tensor at the
// run's AdamW settings (llama).
bool Decoder::adamw_groups(const OptimizerStep& s, std::string* error) {
  struct Kind {
    TensorRole role;
    float lr, beta1, beta2, weight_decay;
  };
  std::vector<Kind> kinds;
  if (recipe_.muon) {
    const float scale = 1.f / std::sqrt(config_.channels / 768.f), f = s.lr_factor, slr = recipe_.scalar_lr;
    kinds = {{TensorRole::kHead, recipe_.unembedding_lr * scale * f, 0.8f, 0.96f, 0.01f},
             {TensorRole::kEmbedding, recipe_.embedding_lr * scale * f, 0.8f, 0.995f, 0.001f},
             {TensorRole::kValueEmbedding, recipe_.embedding_lr * scale * 0.5f * f, 0.8f, 0.995f, 0.01f},
             {TensorRole::kResidLambdas, slr * 0.01f * f, 0.8f, 0.95f, 0.05f},
             {TensorRole::kX0Lambdas, slr * f, 0.96f, 0.95f, 0.f},
             {TensorRole::kSmear, 0.2f * f, 0.8f, 0.95f, 0.f}};
  }
  std::vector<nfn_adamw_group> groups;
  auto group = [&](const DecoderTensor& t, float wd) {
    return nfn_adamw_group{state_.master(t.offset), state_.param_copy(t.offset), state_.grad(t.offset), state_.m(t.offset),
                           state_.v(t.offset), t.count(), wd};
  };
  if (!recipe_.muon) {
    for (const DecoderTensor& t : layout_)
      groups.push_back(group(t, t.role() == TensorRole::kNormWeight ? 0.f : s.weight_decay));
    return check(ops_->adamw_step_many(ctx_, groups.data(), static_cast<int>(groups.size()), s.step + s.moment_steps,
                                       s.lr, s.beta1, s.beta2, s.eps, state_.grad_sumsq(), s.max_grad_norm, dtype_),
                 "adamw_step_many", error);
  }
  for (const Kind& k : kinds) {
    groups.clear();
    for (const DecoderTensor& t : layout_)
      if (t.role() == k.role) groups.push_back(group(t, k.weight_decay));
    if (groups.empty()) continue;
    if (!check(ops_->adamw_step_many(ctx_, groups.data(), static_cast<int>(groups.size()), s.step + s.moment_steps,
                                     k.lr, k.beta1, k.beta2, kAdamEps, state_.grad_sumsq(), 0.f, dtype_),
               "adamw_step_many", error))
      return false;
  }
  return true;
}

// Muon over every block matrix, each its own group (nanochat stacks same-shaped ones, the
// same per-matrix arithmetic), momentum warming up over the first steps.
bool Decoder::muon_groups(const OptimizerStep& s, std::string* error) {
  std::vector<nfn_muon_group> groups;
  for (const DecoderTensor& t : layout_)
    if (t.role() == TensorRole::kMatrix)
      groups.push_back(nfn_muon_group{state_.master(t.offset), state_.param_copy(t.offset), state_.grad(t.offset),
                                      state_.m(t.offset), static_cast<int>(t.rows), static_cast<int>(t.cols)});
  const float warm = std::min(1.f, static_cast<float>(s.step - 1) / std::max(1, recipe_.muon_momentum_warmup));
  const float momentum = recipe_.muon_momentum_start + warm * (recipe_.muon_momentum - recipe_.muon_momentum_start);
  return check(ops_->muon_step_many(ctx_, groups.data(), static_cast<int>(groups.size()),
                                    recipe_.matrix_lr * s.lr_factor, momentum, 1, recipe_.ns_steps,
                                    recipe_.muon_weight_decay, dtype_),
               "muon_step_many", error);
}

bool Decoder::optimizer_step(const OptimizerStep& s, std::string* error) {
  // The gradients' global norm, for the report (and llama's clip): one buffer, every tensor.
  const void* all = state_.grads();
  const size_t count = state_.size();
  if (!check(ops_->sum_squares_many(ctx_, &all, &count, 1, dtype_, state_.grad_sumsq()), "sum_squares_many", error) ||
      !adamw_groups(s, error) || (recipe_.muon && !muon_groups(s, error)))
    return false;
  mark(Stage::kOptimizer);
  return true;
}

}  // namespace nfn
