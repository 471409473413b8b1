#include "cc/infer/decoder_runtime.h"

#include <algorithm>

#include "cc/ops/arena.h"
#include "cc/ops/op_error.h"

namespace nfn {

namespace {
constexpr nfn_dtype kF32 = NFN_F32;
}  // namespace

DecoderRuntime::~DecoderRuntime() { release(); }

void DecoderRuntime::release() {
  if (ops_ != nullptr) {
    if (act_block_) ops_->free(ctx_, act_block_);
    if (state_) ops_->free(ctx_, state_);
  }
  weights_.release();
  act_block_ = state_ = nullptr;
  k_cache_ = v_cache_ = embs_ = nullptr;
  logits_.release();
  cap_rows_ = 0;
}

bool DecoderRuntime::check(nfn_status s, const char* what, std::string* error) const {
  if (s == NFN_OK) return true;
  *error = op_error(*ops_, ctx_, what);
  return false;
}

bool DecoderRuntime::init(const nfn_op_table* ops, nfn_ctx* ctx, const DecoderConfig& config,
                          const std::vector<float>& params, std::string* error, int quant, int context) {
  release();
  const std::string bad = validate_decoder(config);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }
  if (params.size() != decoder_num_parameters(config)) {
    *error = "parameters: got " + std::to_string(params.size()) + " values, the geometry needs " +
             std::to_string(decoder_num_parameters(config));
    return false;
  }
  if (context < 0) {
    *error = "context must be >= 0 (0: the model's " + std::to_string(config.max_seq_len) + " positions), got " +
             std::to_string(context);
    return false;
  }
  ops_ = ops;
  ctx_ = ctx;
  logits_.bind(ops, ctx);
  config_ = config;
  context_ = context > 0 ? std::min(context, config.max_seq_len) : config.max_seq_len;
  off_ = decoder_offsets(config);
  windows_ = layer_windows(config);
  const size_t KD = static_cast<size_t>(config.num_kv_heads) * config.head_dim;
  const size_t cache = static_cast<size_t>(config.num_layers) * context_ * KD;
  if (!weights_.upload(ops_, ctx_, config, params, kF32, quant, error) ||
      !check(ops_->alloc(ctx_, (2 * cache + (config.nanochat() ? static_cast<size_t>(context_) * config.channels : 0)) * 4,
                         &state_), "allocating the KV cache", error))
    return false;
  k_cache_ = static_cast<float*>(state_);
  v_cache_ = k_cache_ + cache;
  embs_ = v_cache_ + cache;
  // Ask the backend for the cached attention once, on the cache itself, so a library that
  // lacks it (or this geometry) is named before any output is produced.
  if (!ensure_rows(1, false, error)) return false;
  const int QKV = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim;
  if (!check(ops_->fill(ctx_, qkv_, kF32, 0.f, QKV), "fill", error) ||
      !check(ops_->attention_kv_cached(ctx_, atty_, k_cache_, v_cache_, qkv_, 1, 1, 0, context_,
                                       config.num_heads, config.num_kv_heads, config.head_dim, windows_[0], kF32),
             "attention_kv_cached", error))
    return false;
  pos_ = rows_ = 0;
  return true;
}

const float* DecoderRuntime::mat(size_t offset, std::string* error) {
  return static_cast<const float*>(weights_.matrix(offset, error));
}

bool DecoderRuntime::ensure_rows(int n, bool logits_all, std::string* error) {
  const DecoderConfig& c = config_;
  const size_t C = c.channels, Vp = c.padded_vocab_size, QD = static_cast<size_t>(c.num_heads) * c.head_dim,
               KD = static_cast<size_t>(c.num_kv_heads) * c.head_dim, H = c.hidden,
               Hf = c.nanochat() ? H : 2 * H;
  if (!logits_.reserve(logits_all ? n : 1, Vp, error)) return false;
  if (n <= cap_rows_) return true;
  if (act_block_) ops_->free(ctx_, act_block_);
  act_block_ = nullptr;
  cap_rows_ = 0;
  const size_t N = n, f = 4, nano = c.nanochat() ? 1 : 0;
  auto slot = [](auto** q, size_t bytes) { return ArenaSlot{reinterpret_cast<void**>(q), bytes}; };
  const std::vector<ArenaSlot> plan = {
      slot(&tokens_, N * 4),
      slot(&targets_, N * 4),
      slot(&emb_, N * C * f),
      slot(&en_, nano * (N + 1) * C * f),
      slot(&x0_, nano * (N + 1) * C * f),
      slot(&x_, N * C * f),
      slot(&xm_, nano * N * C * f),
      slot(&h_, N * C * f),
      slot(&rstd_, N * f),
      slot(&qkv_, N * (QD + 2 * KD) * f),
      slot(&qk_rstd_, nano * N * (c.num_heads + c.num_kv_heads) * f),
      slot(&ve_, nano * N * KD * f),
      slot(&atty_, N * QD * f),
      slot(&fc_, N * Hf * f),
      slot(&act_, N * H * f),
      slot(&mid_, nano * N * C * f),
      slot(&xb_, nano * N * C * f),
      slot(&lnf_, N * C * f),
      slot(&losses_, N * f),
  };
  if (!alloc_arena(*ops_, ctx_, plan, "allocating activations", &act_block_, error)) return false;
  cap_rows_ = n;
  return true;
}

// The token embedding into x; nanochat's is normed and smeared: x0[t] = e[t] + lam sigmoid(
// e[t,:24] . w) e[t-1], where the row before the block's first is the cached position's before
// it (embs_ keeps every cached position's), or zeros at position 0.
bool DecoderRuntime::embed(int n, std::string* error) {
  const nfn_op_table& o = *ops_;
  const int C = config_.channels;
  const size_t NC = static_cast<size_t>(n) * C;
  if (!config_.nanochat())
    return check(o.embedding_forward(ctx_, x_, tokens_, p(off_.wte), nullptr, 1, n, C, kF32), "embedding_forward",
                 error);
  const bool first = pos_ == 0;
  return check(o.embedding_forward(ctx_, emb_, tokens_, p(off_.wte), nullptr, 1, n, C, kF32), "embedding_forward",
               error) &&
         check(o.rmsnorm_forward(ctx_, en_ + C, rstd_, emb_, nullptr, n, C, config_.norm_eps, kF32),
               "rmsnorm_forward (embedding)", error) &&
         check(first ? o.fill(ctx_, en_, kF32, 0.f, C)
                     : o.copy(ctx_, en_, embs_ + static_cast<size_t>(pos_ - 1) * C, static_cast<size_t>(C) * 4,
                              NFN_DEVICE_TO_DEVICE),
               "the previous embedding", error) &&
         check(o.copy(ctx_, x0_, en_, (NC + C) * 4, NFN_DEVICE_TO_DEVICE), "copy", error) &&
         check(o.gated_add_forward(ctx_, x0_, en_, p(off_.smear_gate), p(off_.smear_lambda), en_, n + 1, n + 1, 1, C,
                                   kSmearGateChannels, 1, C, C, C, 1.f, kF32), "gated_add_forward (smear)", error) &&
         check(o.copy(ctx_, embs_ + static_cast<size_t>(pos_) * C, en_ + C, NC * 4, NFN_DEVICE_TO_DEVICE), "copy",
               error) &&
         check(o.copy(ctx_, x_, x0_ + C, NC * 4, NFN_DEVICE_TO_DEVICE), "copy", error);
}

bool DecoderRuntime::layer_forward(int l, int n, std::string* error) {
  const DecoderConfig& c = config_;
  const nfn_op_table& o = *ops_;
  const DecoderOffsets::Layer& w = off_.layers[l];
  const bool nano = c.nanochat();
  const int C = c.channels, NH = c.num_heads, NKV = c.num_kv_heads, HD = c.head_dim, QD = NH * HD, KD = NKV * HD,
            QKV = QD + 2 * KD, H = c.hidden, Hf = nano ? H : 2 * H, maxT = context_;
  const size_t NC = static_cast<size_t>(n) * C, cache_layer = static_cast<size_t>(maxT) * KD;
  const float eps = c.norm_eps;
  if (nano && !check(o.scaled_sum_forward(ctx_, xm_, x_, x0_ + C, p(off_.resid + l), p(off_.x0l + l), 1.f, 1.f, NC,
                                          kF32), "scaled_sum_forward (lambdas)", error))
    return false;
  float* block_in = nano ? xm_ : x_;
  const float* wm = nullptr;  // each matrix as its GEMM reads it (dequantized just before)
  if (!check(o.rmsnorm_forward(ctx_, h_, rstd_, block_in, nano ? nullptr : p(w.attn_norm), n, C, eps, kF32),
             "rmsnorm_forward (attention)", error) ||
      !(wm = mat(w.qkv, error)) ||
      !check(o.linear_forward(ctx_, qkv_, nullptr, h_, wm, nullptr, nullptr, n, C, QKV, NFN_EPILOGUE_NONE, kF32),
             "linear_forward (qkv)", error))
    return false;
  if (w.has_ve && (!check(o.embedding_forward(ctx_, ve_, tokens_, p(w.ve_table), nullptr, 1, n, KD, kF32),
                          "embedding_forward (value embedding)", error) ||
                   !check(o.gated_add_forward(ctx_, qkv_ + QD + KD, h_, p(w.ve_gate), nullptr, ve_, n, n, NKV, HD,
                                              kValueGateChannels, 0, QKV, C, KD, kValueGateScale, kF32),
                          "gated_add_forward (value embedding)", error)))
    return false;
  if (!check(o.rope_forward(ctx_, qkv_, qkv_, n, n, pos_, QKV, NH, NKV, HD, c.rope_theta, nano ? -1 : 1, kF32),
             "rope_forward", error) ||
      (nano && !check(o.head_rmsnorm_forward(ctx_, qkv_, qk_rstd_, qkv_, n, NH + NKV, HD, QKV, kQkNormScale, eps,
                                             kF32), "head_rmsnorm_forward (QK-norm)", error)) ||
      !check(o.attention_kv_cached(ctx_, atty_, k_cache_ + l * cache_layer, v_cache_ + l * cache_layer, qkv_, 1, n,
                                   pos_, maxT, NH, NKV, HD, windows_[l], kF32), "attention_kv_cached", error) ||
      !(wm = mat(w.o, error)) ||
      !check(o.linear_forward(ctx_, x_, nullptr, atty_, wm, nullptr, block_in, n, QD, C, NFN_EPILOGUE_NONE, kF32),
             "linear_forward (attention output)", error) ||
      !check(o.rmsnorm_forward(ctx_, h_, rstd_, x_, nano ? nullptr : p(w.mlp_norm), n, C, eps, kF32),
             "rmsnorm_forward (mlp)", error) ||
      !(wm = mat(w.fc, error)) ||
      !check(o.linear_forward(ctx_, fc_, nullptr, h_, wm, nullptr, nullptr, n, C, Hf, NFN_EPILOGUE_NONE, kF32),
             "linear_forward (mlp up)", error))
    return false;
  const bool activated =
      nano ? check(o.relu_squared_forward(ctx_, act_, fc_, static_cast<size_t>(n) * H, kF32), "relu_squared_forward",
                   error)
           : check(o.swiglu_forward(ctx_, act_, fc_, n, H, kF32), "swiglu_forward", error);
  return activated && (wm = mat(w.proj, error)) &&
         check(o.linear_forward(ctx_, x_, nullptr, act_, wm, nullptr, x_, n, H, C, NFN_EPILOGUE_NONE, kF32),
               "linear_forward (mlp down)", error) &&
         (!nano || l != c.num_layers / 2 ||
          check(o.copy(ctx_, mid_, x_, NC * 4, NFN_DEVICE_TO_DEVICE), "copy", error));
}

bool DecoderRuntime::forward(const int32_t* tokens, int n, std::string* error) {
  *error = check_forward_block(*this, tokens, n);
  if (!error->empty() || !ensure_rows(n, false, error)) return false;
  const nfn_op_table& o = *ops_;
  const int C = config_.channels;
  const bool nano = config_.nanochat();
  if (!check(o.copy(ctx_, tokens_, tokens, static_cast<size_t>(n) * 4, NFN_HOST_TO_DEVICE), "uploading tokens",
             error) ||
      !embed(n, error))
    return false;
  for (int l = 0; l < config_.num_layers; ++l)
    if (!layer_forward(l, n, error)) return false;
  // nanochat's backout, x - lam x_mid, then the final norm.
  if (nano && !check(o.scaled_sum_forward(ctx_, xb_, x_, mid_, nullptr, p(off_.backout), 1.f, -1.f,
                                          static_cast<size_t>(n) * C, kF32), "scaled_sum_forward (backout)", error))
    return false;
  if (!check(o.rmsnorm_forward(ctx_, lnf_, rstd_, nano ? xb_ : x_, nano ? nullptr : p(off_.final_norm), n, C,
                               config_.norm_eps, kF32), "rmsnorm_forward (final)", error))
    return false;
  pos_ += n;
  rows_ = n;
  return true;
}

bool DecoderRuntime::logits(bool all_rows, std::vector<float>* out, std::string* error) {
  if (rows_ == 0) {
    *error = "logits: no forward to read";
    return false;
  }
  if (!ensure_rows(rows_, all_rows, error)) return false;
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const int rows = all_rows ? rows_ : 1;
  const size_t count = static_cast<size_t>(rows) * Vp;
  const float* x = lnf_ + static_cast<size_t>(rows_ - rows) * C;
  if (!check(ops_->linear_forward(ctx_, logits_.data(), nullptr, x, p(off_.head), nullptr, nullptr, rows, C, Vp,
                                  NFN_EPILOGUE_NONE, kF32), "linear_forward (logits)", error) ||
      (config_.nanochat() &&
       !check(ops_->softcap_forward(ctx_, logits_.data(), logits_.data(), count, kLogitSoftcap, kF32),
              "softcap_forward", error)))
    return false;
  return logits_.download(rows, V, Vp, out, error);
}

bool DecoderRuntime::losses(const int32_t* targets, std::vector<float>* out, std::string* error) {
  *error = check_targets(*this, rows_, targets);
  if (!error->empty()) return false;
  const int n = rows_;
  out->resize(n);
  return check(ops_->copy(ctx_, targets_, targets, static_cast<size_t>(n) * 4, NFN_HOST_TO_DEVICE),
               "uploading targets", error) &&
         check(ops_->lm_head_cross_entropy(ctx_, losses_, nullptr, nullptr, nullptr, lnf_, p(off_.head), targets_, n,
                                           config_.channels, config_.vocab_size, config_.padded_vocab_size, 0.f,
                                           config_.nanochat() ? kLogitSoftcap : 0.f, kF32),
               "lm_head_cross_entropy", error) &&
         check(ops_->copy(ctx_, out->data(), losses_, static_cast<size_t>(n) * 4, NFN_DEVICE_TO_HOST), "copy",
               error) &&
         check(ops_->synchronize(ctx_), "synchronize", error);
}

}  // namespace nfn
