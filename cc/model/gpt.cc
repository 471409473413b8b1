#include "cc/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "cc/ops/arena.h"
#include "cc/model/token_upload.h"
#include "cc/ops/op_error.h"
#include "cc/util/bf16.h"
#include "cc/util/rng.h"

namespace nfn {

namespace {

// Parameter tensor indices, in checkpoint order.
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };
}  // namespace

bool parse_recompute(const std::string& name, GPTRecompute* out) {
  if (name != "none" && name != "attention" && name != "mlp" && name != "all") return false;
  out->attention = name == "attention" || name == "all";
  out->mlp = name == "mlp" || name == "all";
  return true;
}

// Activations of one micro-batch, kept for the backward, plus scratch buffers.
// Per-layer tensors are L consecutive slices, or one slice when recomputed (GPTRecompute).
struct GPT::Acts {
  void* encoded;               // (N,C)
  void *ln1, *ln2;             // (L,N,C)
  float *ln1_mean, *ln1_rstd;  // (L,N)
  float *ln2_mean, *ln2_rstd;
  void* qkv;                   // (L,N,3C)
  void* atty;                  // (L,N,C)
  float* lse;                  // (L,B,NH,T)
  void *residual2, *residual3; // (L,N,C)
  void *fch, *fch_gelu;        // (L,N,4C): pre-GELU (kept for the backward) and GELU output
  void* lnf;                   // (N,C)
  float *lnf_mean, *lnf_rstd;  // (N)
  float* losses;               // (N)
  int32_t *inputs, *targets;   // (N)
  uint16_t* window;            // (N+1)
  void *dresidual, *dln;       // (N,C) gradient of the residual stream; of a norm output
  void* dbig;                  // (N,4C) gradient of the MLP hidden, or of qkv
  void* logits;                // (Vp) for sampling
  float* logits_f32;           // (Vp)
};

// Layer l's input and its activations: slice l of each per-layer tensor, or the one slice of
// a recomputed tensor.
struct GPT::Layer {
  const void* residual;  // the layer's input: the embedding, or residual3 of the layer before
  void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
  float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
};

GPT::~GPT() { release(); }

void GPT::release() {
  if (ops_ != nullptr) {
    if (act_block_) ops_->free(ctx_, act_block_);
    if (param_block_) ops_->free(ctx_, param_block_);
  }
  act_block_ = param_block_ = nullptr;
  delete acts_;
  acts_ = nullptr;
  have_inputs_ = have_targets_ = false;
}

bool GPT::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = op_error(*ops_, ctx_, what);
  return false;
}

void* GPT::param(int i) const { return state_.param(layout_[i].offset); }
void* GPT::grad(int i) const { return state_.grad(layout_[i].offset); }

// Layer l's slice of per-layer tensor i (shape (L, ...)) in a parameter-shaped block.
void* GPT::layer_slice(void* block, int i, int l) const {
  const size_t per_layer = layout_[i].count / static_cast<size_t>(config_.num_layers);
  return static_cast<char*>(block) + (layout_[i].offset + static_cast<size_t>(l) * per_layer) * esize();
}

bool GPT::init(const nfn_op_table* ops, nfn_ctx* ctx, const GPTConfig& config, nfn_dtype dtype,
               std::string* error, int B, int T, GPTRecompute recompute) {
  release();
  std::string bad = validate_config(config);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }
  ops_ = ops;
  ctx_ = ctx;
  config_ = config;
  dtype_ = dtype;
  recompute_ = recompute;
  layout_ = param_layout(config);
  state_.bind(ops, ctx, dtype, nfn::num_parameters(config));
  std::vector<ArenaSlot> plan = state_.plan();
  if (B > 0 && T > 0) {
    if (!check_sequence_length(T, error)) return false;
    const std::vector<ArenaSlot> acts = activation_slots(B, T);
    plan.insert(plan.end(), acts.begin(), acts.end());
  }
  const std::string what = B > 0 && T > 0 ? "allocating the model and the activations of micro-batch " +
                                                  std::to_string(B) + " x " + std::to_string(T)
                                            : "allocating parameters";
  if (!alloc_arena(*ops_, ctx_, plan, what, &param_block_, error))
    return false;
  if (B > 0 && T > 0) {
    B_ = B;
    T_ = T;
    ++activations_version_;
  }
  return state_.ready(error);
}

namespace {

// t[k] = std * draw (first + k) of the normal stream `seed` starts, for k in [0, n): exactly
// what one Rng drawing them in order gives, split across the machine's threads (GPT-2 124M's
// 124M draws take 2.5 s on one).
void fill_normal(float* t, size_t n, float std, uint64_t seed, uint64_t first) {
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t parts = std::max<size_t>(1, std::min(threads, n >> 16));
  auto fill = [=](size_t begin, size_t end) {
    Rng rng(seed);
    rng.skip(2 * (first + begin));
    for (size_t k = begin; k < end; ++k) t[k] = std * rng.normal();
  };
  std::vector<std::thread> helpers;
  for (size_t p = 1; p < parts; ++p) helpers.emplace_back(fill, n * p / parts, n * (p + 1) / parts);
  fill(0, n / parts);
  for (std::thread& h : helpers) h.join();
}

}  // namespace

std::vector<float> GPT::random_parameters(const GPTConfig& c, uint64_t seed) {
  auto layout = param_layout(c);
  std::vector<float> w(nfn::num_parameters(c), 0.f);
  uint64_t drawn = 0;  // normals drawn so far, in tensor order
  const float residual_std = 0.02f / std::sqrt(2.0f * c.num_layers);
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* t = w.data() + layout[i].offset;
    const size_t n = layout[i].count;
    if (i == LN1W || i == LN2W || i == LNFW) {
      for (size_t k = 0; k < n; ++k) t[k] = 1.f;
    } else if (i == WTE || i == WPE || i == QKVW || i == FCW || i == ATTPROJW || i == FCPROJW) {
      float std = (i == ATTPROJW || i == FCPROJW) ? residual_std : (i == WPE ? 0.01f : 0.02f);
      size_t rows_used = n;
      if (i == WTE) rows_used = static_cast<size_t>(c.vocab_size) * c.channels;  // padding rows stay 0
      fill_normal(t, rows_used, std, seed, drawn);
      drawn += rows_used;
    }
  }
  return w;
}

bool GPT::set_parameters(const std::vector<float>& host, std::string* error) {
  if (host.size() != state_.size()) {
    *error = "parameters: got " + std::to_string(host.size()) + " values, the model has " +
             std::to_string(state_.size());
    return false;
  }
  return upload(Stored::kMaster, 0, host.size(), host.data(), error);
}

bool GPT::get_parameters(std::vector<float>* host, std::string* error) {
  host->resize(state_.size());
  return download(Stored::kMaster, 0, host->size(), host->data(), error);
}

bool GPT::check_sequence_length(int T, std::string* error) const {
  if (T <= config_.max_seq_len) return true;
  *error = "sequence length " + std::to_string(T) + " exceeds the model's context " + std::to_string(config_.max_seq_len);
  return false;
}

bool GPT::ensure_activations(int B, int T, std::string* error) {
  if (B == B_ && T == T_ && acts_ != nullptr) return true;
  if (!check_sequence_length(T, error)) return false;
  // Another shape than init reserved (or none reserved): a block of its own, the reserved
  // slots in the model's block left unused. It is asked for beside the current shape's block,
  // so a shape the op library refuses leaves the model as it was, running that shape. Only
  // where it fits in place of that block alone is the current block given up for it; if it
  // does not fit even then, the model holds no activations and the next upload (of any shape)
  // allocates them again.
  Acts* fresh = new Acts();
  void* block = nullptr;
  const std::string what = "allocating the activations of micro-batch " + std::to_string(B) + " x " + std::to_string(T);
  const std::vector<ArenaSlot> plan = activation_plan(config_, B, T, esize(), recompute_, fresh);
  bool ok = alloc_arena(*ops_, ctx_, plan, what, &block, error);
  if (!ok && act_block_ != nullptr) {
    release_activations();
    ok = alloc_arena(*ops_, ctx_, plan, what, &block, error);
  }
  if (!ok) {
    delete fresh;
    return false;
  }
  release_activations();
  act_block_ = block;
  acts_ = fresh;
  B_ = B;
  T_ = T;
  return true;
}

// Gives up the current shape's own activation block (not the slots init reserved in the
// model's block): no activations, no tokens, and a new version (a recorded step records again).
void GPT::release_activations() {
  if (act_block_) ops_->free(ctx_, act_block_);
  act_block_ = nullptr;
  delete acts_;
  acts_ = nullptr;
  B_ = T_ = 0;
  have_inputs_ = have_targets_ = false;
  ++activations_version_;
}

// The activation buffers of a (B, T) micro-batch in elements of e bytes, into `a`: L slices
// of each per-layer tensor, one of each that the backward recomputes.
std::vector<ArenaSlot> GPT::activation_plan(const GPTConfig& config, int B, int T, size_t e, GPTRecompute recompute,
                                            Acts* a) {
  const size_t L = config.num_layers, C = config.channels, NH = config.num_heads;
  const size_t N = static_cast<size_t>(B) * T, Vp = config.padded_vocab_size;
  const size_t La = recompute.attention ? 1 : L, Lm = recompute.mlp ? 1 : L;
  return {
      {&a->encoded, N * C * e},
      {&a->ln1, La * N * C * e},
      {reinterpret_cast<void**>(&a->ln1_mean), La * N * 4},
      {reinterpret_cast<void**>(&a->ln1_rstd), La * N * 4},
      {&a->qkv, La * N * 3 * C * e},
      {&a->atty, La * N * C * e},
      {reinterpret_cast<void**>(&a->lse), La * N * NH * 4},
      {&a->residual2, La * N * C * e},
      {&a->ln2, Lm * N * C * e},
      {reinterpret_cast<void**>(&a->ln2_mean), Lm * N * 4},
      {reinterpret_cast<void**>(&a->ln2_rstd), Lm * N * 4},
      {&a->fch, Lm * N * 4 * C * e},
      {&a->fch_gelu, Lm * N * 4 * C * e},
      {&a->residual3, L * N * C * e},
      {&a->lnf, N * C * e},
      {reinterpret_cast<void**>(&a->lnf_mean), N * 4},
      {reinterpret_cast<void**>(&a->lnf_rstd), N * 4},
      {reinterpret_cast<void**>(&a->losses), N * 4},
      {reinterpret_cast<void**>(&a->inputs), N * 4},
      {reinterpret_cast<void**>(&a->targets), N * 4},
      {reinterpret_cast<void**>(&a->window), (N + 1) * 2},
      {&a->dresidual, N * C * e},
      {&a->dln, N * C * e},
      {&a->dbig, N * 4 * C * e},
      {&a->logits, Vp * e},
      {reinterpret_cast<void**>(&a->logits_f32), Vp * 4},
  };
}

// The activation buffers of a (B, T) micro-batch, pointed into whatever block the slots get.
std::vector<ArenaSlot> GPT::activation_slots(int B, int T) {
  delete acts_;
  acts_ = new Acts();
  return activation_plan(config_, B, T, esize(), recompute_, acts_);
}

size_t GPT::memory_bytes(const GPTConfig& config, nfn_dtype dtype, int B, int T, GPTRecompute recompute) {
  ParamState state;
  state.bind(nullptr, nullptr, dtype, nfn::num_parameters(config));
  Acts acts;
  size_t bytes = arena_bytes(state.plan());
  if (B > 0 && T > 0)
    bytes += arena_bytes(activation_plan(config, B, T, dtype == NFN_F32 ? 4 : 2, recompute, &acts));
  return bytes;
}

bool GPT::upload_window_u16(const uint16_t* window, int B, int T, std::string* error) {
  if (!ensure_activations(B, T, error)) return false;
  have_inputs_ = have_targets_ = upload_token_window(*ops_, ctx_, acts_->window, acts_->inputs, acts_->targets, window,
                                                     static_cast<size_t>(B) * T, error);
  return have_inputs_;
}

bool GPT::upload_tokens(const int32_t* inputs, const int32_t* targets, int B, int T, std::string* error) {
  return ensure_activations(B, T, error) && upload_token_ids(*ops_, ctx_, acts_->inputs, acts_->targets, inputs, targets,
                                                             static_cast<size_t>(B) * T, &have_inputs_,
                                                             &have_targets_, error);
}

GPT::Layer GPT::layer(int l) const {
  const Acts& a = *acts_;
  const size_t N = static_cast<size_t>(B_) * T_, NC = N * config_.channels, NH = config_.num_heads;
  // Layer l's slice of the attention half's tensors and of the MLP's: 0 where recomputed.
  const size_t la = recompute_.attention ? 0 : l, lm = recompute_.mlp ? 0 : l;
  auto at = [&](void* base, size_t slice, size_t per) -> void* {
    return static_cast<char*>(base) + slice * per * esize();
  };
  Layer x;
  x.residual = l == 0 ? a.encoded : at(a.residual3, l - 1, NC);
  x.ln1 = at(a.ln1, la, NC);
  x.ln1_mean = a.ln1_mean + la * N;
  x.ln1_rstd = a.ln1_rstd + la * N;
  x.qkv = at(a.qkv, la, 3 * NC);
  x.atty = at(a.atty, la, NC);
  x.lse = a.lse + la * N * NH;
  x.res2 = at(a.residual2, la, NC);
  x.ln2 = at(a.ln2, lm, NC);
  x.ln2_mean = a.ln2_mean + lm * N;
  x.ln2_rstd = a.ln2_rstd + lm * N;
  x.fch = at(a.fch, lm, 4 * NC);
  x.fch_gelu = at(a.fch_gelu, lm, 4 * NC);
  x.res3 = at(a.residual3, l, NC);
  return x;
}

// residual2 = residual + attproj(attention(qkv(ln1(residual)))): the projection adds onto the
// residual stream.
bool GPT::attention_half(int l, const Layer& x, std::string* error) {
  const int B = B_, T = T_, C = config_.channels, NH = config_.num_heads, N = B * T;
  const nfn_op_table& o = *ops_;
  auto pl = [&](int i) { return layer_slice(state_.params(), i, l); };
  return check(o.layernorm_forward(ctx_, x.ln1, x.ln1_mean, x.ln1_rstd, x.residual, pl(LN1W), pl(LN1B), N, C,
                                   dtype_), "layernorm_forward (ln1)", error) &&
         check(o.linear_forward(ctx_, x.qkv, nullptr, x.ln1, pl(QKVW), pl(QKVB), nullptr, N, C, 3 * C,
                                NFN_EPILOGUE_NONE, dtype_), "linear_forward (qkv)", error) &&
         check(o.attention_forward(ctx_, x.atty, x.lse, x.qkv, B, T, NH, NH, C / NH, 0, dtype_), "attention_forward",
               error) &&
         check(o.linear_forward(ctx_, x.res2, nullptr, x.atty, pl(ATTPROJW), pl(ATTPROJB), x.residual, N, C, C,
                                NFN_EPILOGUE_NONE, dtype_), "linear_forward (attproj)", error);
}

// The MLP's hidden layer, gelu(fc(ln2(residual2))), and fc's pre-activation beside it.
bool GPT::mlp_hidden(int l, const Layer& x, std::string* error) {
  const int C = config_.channels, N = B_ * T_;
  const nfn_op_table& o = *ops_;
  auto pl = [&](int i) { return layer_slice(state_.params(), i, l); };
  return check(o.layernorm_forward(ctx_, x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, pl(LN2W), pl(LN2B), N, C, dtype_),
               "layernorm_forward (ln2)", error) &&
         check(o.linear_forward(ctx_, x.fch_gelu, x.fch, x.ln2, pl(FCW), pl(FCB), nullptr, N, C, 4 * C,
                                NFN_EPILOGUE_GELU, dtype_), "linear_forward (fc)", error);
}

bool GPT::forward(bool with_loss, bool backward, float grad_scale, std::string* error) {
  const int B = B_, T = T_, C = config_.channels, L = config_.num_layers, N = B * T;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  if (!check(o.embedding_forward(ctx_, a.encoded, a.inputs, param(WTE), param(WPE), B, T, C, dtype_),
             "embedding_forward", error))
    return false;
  mark(Stage::kEmbedding);
  const void* residual = a.encoded;
  for (int l = 0; l < L; ++l) {
    const Layer x = layer(l);
    if (!attention_half(l, x, error)) return false;
    mark(Stage::kAttentionForward, l);
    // residual3 = residual2 + fcproj(mlp hidden)
    if (!mlp_hidden(l, x, error) ||
        !check(o.linear_forward(ctx_, x.res3, nullptr, x.fch_gelu, layer_slice(state_.params(), FCPROJW, l),
                                layer_slice(state_.params(), FCPROJB, l), x.res2, N, 4 * C, C, NFN_EPILOGUE_NONE, dtype_),
               "linear_forward (fcproj)", error))
      return false;
    mark(Stage::kMlpForward, l);
    residual = x.res3;
  }
  if (!check(o.layernorm_forward(ctx_, a.lnf, a.lnf_mean, a.lnf_rstd, residual, param(LNFW), param(LNFB), N, C,
                                 dtype_), "layernorm_forward (lnf)", error))
    return false;
  if (!with_loss) return true;
  // The LM head and loss, fused with the first step of the backward (dlnf into dln).
  if (!check(o.lm_head_cross_entropy(ctx_, a.losses, state_.loss_sum(), backward ? a.dln : nullptr,
                                     backward ? grad(WTE) : nullptr, a.lnf, param(WTE), a.targets, N, C,
                                     config_.vocab_size, config_.padded_vocab_size, grad_scale, 0.f, dtype_),
             "lm_head_cross_entropy", error))
    return false;
  mark(Stage::kLmHead);
  return true;
}

bool GPT::backward(std::string* error) {
  const int B = B_, T = T_, C = config_.channels, L = config_.num_layers;
  const size_t NC = static_cast<size_t>(B) * T * C;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  // dln holds dL/dlnf from the fused LM head. The residual stream's gradient accumulates
  // in dresidual through every norm backward. The projections' bias gradients are the
  // column sums of the stream's gradient where their outputs joined it: each norm backward
  // sums the gradient it leaves (dinp_colsum) for the projection below it, and fcproj's
  // backward, through the GELU, sums fc's.
  const void* last_residual = L > 0 ? layer(L - 1).res3 : a.encoded;
  if (!check(o.fill(ctx_, a.dresidual, dtype_, 0.f, NC), "fill", error) ||
      !check(o.layernorm_backward(ctx_, a.dresidual, grad(LNFW), grad(LNFB),
                                  L > 0 ? layer_slice(state_.grads(), FCPROJB, L - 1) : nullptr, a.dln, last_residual,
                                  param(LNFW), a.lnf_mean, a.lnf_rstd, B * T, C, dtype_),
             "layernorm_backward (lnf)", error))
    return false;
  mark(Stage::kLmHead);
  for (int l = L - 1; l >= 0; --l)
    if (!layer_backward(l, error)) return false;
  if (!check(o.embedding_backward(ctx_, grad(WTE), grad(WPE), a.dresidual, a.inputs, B, T, C, dtype_),
             "embedding_backward", error))
    return false;
  mark(Stage::kEmbedding);
  return true;
}

// Layer l's backward, after what it recomputes: the attention half's rerun counts in the
// layer's attention backward, the MLP's in its MLP backward. The last layer's recomputed
// tensors still hold the forward's.
bool GPT::layer_backward(int l, std::string* error) {
  const Layer x = layer(l);
  const bool rerun = l < config_.num_layers - 1;
  if (rerun && recompute_.attention) {
    if (!attention_half(l, x, error)) return false;
    mark(Stage::kAttentionBackward, l);
  }
  if ((rerun && recompute_.mlp && !mlp_hidden(l, x, error)) || !mlp_half_backward(l, x, error)) return false;
  mark(Stage::kMlpBackward, l);
  if (!attention_half_backward(l, x, error)) return false;
  mark(Stage::kAttentionBackward, l);
  return true;
}

// MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))); fcproj's dinp comes back
// through the GELU (with respect to fch, the pre-activation). fcproj's bias gradient came
// from the norm backward above this block.
bool GPT::mlp_half_backward(int l, const Layer& x, std::string* error) {
  const int C = config_.channels, N = B_ * T_;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  auto pl = [&](int i) { return layer_slice(state_.params(), i, l); };
  auto gl = [&](int i) { return layer_slice(state_.grads(), i, l); };
  return check(o.linear_backward(ctx_, a.dbig, gl(FCPROJW), nullptr, gl(FCB), a.dresidual, x.fch_gelu, pl(FCPROJW),
                                 x.fch, N, 4 * C, C, 0, dtype_), "linear_backward (fcproj)", error) &&
         check(o.linear_backward(ctx_, a.dln, gl(FCW), nullptr, nullptr, a.dbig, x.ln2, pl(FCW), nullptr, N, C,
                                 4 * C, 0, dtype_), "linear_backward (fc)", error) &&
         check(o.layernorm_backward(ctx_, a.dresidual, gl(LN2W), gl(LN2B), gl(ATTPROJB), a.dln, x.res2, pl(LN2W),
                                    x.ln2_mean, x.ln2_rstd, N, C, dtype_), "layernorm_backward (ln2)", error);
}

// Attention: residual2 = residual + attproj(attention(qkv(ln1(residual)))); ln1's backward
// sums the stream's gradient for the bias of the projection below (the layer before's fcproj).
bool GPT::attention_half_backward(int l, const Layer& x, std::string* error) {
  const int B = B_, T = T_, C = config_.channels, NH = config_.num_heads, N = B * T;
  const nfn_op_table& o = *ops_;
  Acts& a = *acts_;
  auto pl = [&](int i) { return layer_slice(state_.params(), i, l); };
  auto gl = [&](int i) { return layer_slice(state_.grads(), i, l); };
  return check(o.linear_backward(ctx_, a.dln, gl(ATTPROJW), nullptr, nullptr, a.dresidual, x.atty, pl(ATTPROJW),
                                 nullptr, N, C, C, 0, dtype_), "linear_backward (attproj)", error) &&
         check(o.attention_backward(ctx_, a.dbig, a.dln, x.qkv, x.atty, x.lse, B, T, NH, NH, C / NH, 0, dtype_),
               "attention_backward", error) &&
         check(o.linear_backward(ctx_, a.dln, gl(QKVW), gl(QKVB), nullptr, a.dbig, x.ln1, pl(QKVW), nullptr, N, C,
                                 3 * C, 0, dtype_), "linear_backward (qkv)", error) &&
         check(o.layernorm_backward(ctx_, a.dresidual, gl(LN1W), gl(LN1B),
                                    l > 0 ? layer_slice(state_.grads(), FCPROJB, l - 1) : nullptr, a.dln, x.residual,
                                    pl(LN1W), x.ln1_mean, x.ln1_rstd, N, C, dtype_),
               "layernorm_backward (ln1)", error);
}

bool GPT::step_forward_backward(bool backward, float grad_scale, std::string* error) {
  if (acts_ == nullptr || !have_targets_) {
    *error = "forward: no tokens with targets uploaded";
    return false;
  }
  return forward(true, backward, grad_scale, error) && (!backward || this->backward(error));
}

bool GPT::logits_for_row(int row, std::vector<float>* logits, std::string* error) {
  if (acts_ == nullptr || !have_inputs_) {
    *error = "logits: no tokens uploaded";
    return false;
  }
  if (row < 0 || row >= B_ * T_) {
    *error = "logits: row out of range";
    return false;
  }
  if (!forward(false, false, 0.f, error)) return false;
  const int C = config_.channels, Vp = config_.padded_vocab_size;
  const void* x = static_cast<const char*>(acts_->lnf) + static_cast<size_t>(row) * C * esize();
  if (!check(ops_->linear_forward(ctx_, acts_->logits, nullptr, x, param(WTE), nullptr, nullptr, 1, C, Vp,
                                  NFN_EPILOGUE_NONE, dtype_), "linear_forward (logits)", error))
    return false;
  const void* src = acts_->logits;
  if (dtype_ != NFN_F32) {
    if (!check(ops_->convert(ctx_, acts_->logits_f32, NFN_F32, acts_->logits, dtype_, Vp), "convert", error))
      return false;
    src = acts_->logits_f32;
  }
  logits->resize(config_.vocab_size);
  return check(ops_->copy(ctx_, logits->data(), src, logits->size() * 4, NFN_DEVICE_TO_HOST), "copy", error) &&
         check(ops_->synchronize(ctx_), "synchronize", error);
}

bool GPT::optimizer_step(const OptimizerStep& s, std::string* error) {
  const void* bufs[kNumParamTensors];
  size_t counts[kNumParamTensors];
  nfn_adamw_group groups[kNumParamTensors];
  for (int i = 0; i < kNumParamTensors; ++i) {
    bufs[i] = grad(i);
    counts[i] = layout_[i].count;
    const size_t at = layout_[i].offset;
    groups[i] = nfn_adamw_group{state_.master(at), state_.param_copy(at), grad(i), state_.m(at), state_.v(at),
                                layout_[i].count, param_decays(i) ? s.weight_decay : 0.f};
  }
  if (!check(ops_->sum_squares_many(ctx_, bufs, counts, kNumParamTensors, dtype_, state_.grad_sumsq()),
             "sum_squares_many", error) ||
      !check(ops_->adamw_step_many(ctx_, groups, kNumParamTensors, s.step + s.moment_steps, s.lr, s.beta1, s.beta2,
                                   s.eps, state_.grad_sumsq(), s.max_grad_norm, dtype_), "adamw_step_many", error))
    return false;
  mark(Stage::kOptimizer);
  return true;
}

}  // namespace nfn
