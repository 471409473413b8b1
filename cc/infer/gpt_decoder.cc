#include "cc/infer/gpt_decoder.h"

#include "cc/ops/arena.h"
#include "cc/ops/op_error.h"

#include <algorithm>
#include <utility>

namespace nfn {

namespace {
// Parameter tensor indices, in checkpoint order.
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };
}  // namespace

GPTDecoder::~GPTDecoder() { release(); }

void GPTDecoder::release() {
  if (ops_ != nullptr) {
    if (act_block_) ops_->free(ctx_, act_block_);
    if (params_) ops_->free(ctx_, params_);
    if (k_cache_) ops_->free(ctx_, k_cache_);
  }
  act_block_ = params_ = nullptr;
  k_cache_ = v_cache_ = nullptr;
  logits_.release();
  cap_rows_ = 0;
}

void* GPTDecoder::param(int i, int layer) const {
  return static_cast<float*>(params_) + offsets_[i] + static_cast<size_t>(layer) * per_layer_[i];
}

const void* GPTDecoder::head() const { return param(WTE); }

bool GPTDecoder::init(const nfn_op_table* ops, nfn_ctx* ctx, const GPTConfig& config,
                      const std::vector<float>& params, std::string* error) {
  release();
  std::string bad = validate_config(config);
  if (!bad.empty()) {
    *error = "model geometry: " + bad;
    return false;
  }
  if (params.size() != num_parameters(config)) {
    *error = "parameters: got " + std::to_string(params.size()) + " values, the geometry needs " +
             std::to_string(num_parameters(config));
    return false;
  }
  ops_ = ops;
  ctx_ = ctx;
  logits_.bind(ops, ctx);
  config_ = config;
  offsets_.clear();
  per_layer_.clear();
  for (const ParamTensor& t : param_layout(config)) {
    offsets_.push_back(t.offset);
    per_layer_.push_back(t.count / config.num_layers);  // the layer stride of ln1w..fcprojb
  }
  per_layer_[WTE] = per_layer_[WPE] = per_layer_[LNFW] = per_layer_[LNFB] = 0;  // not per layer
  if (!check(ops_->alloc(ctx_, params.size() * 4, &params_), "allocating parameters", error) ||
      !check(ops_->copy(ctx_, params_, params.data(), params.size() * 4, NFN_HOST_TO_DEVICE),
             "uploading parameters", error) ||
      !resize_slots(1, error))
    return false;
  // Ask the backend for the cached attention once, on the cache itself, so a library that
  // lacks it is named before any output is produced.
  if (!ensure_rows(1, error)) return false;
  const int C = config.channels;
  if (!check(ops_->fill(ctx_, qkv_, NFN_F32, 0.f, 3 * static_cast<size_t>(C)), "fill", error) ||
      !check(ops_->attention_kv_cached(ctx_, atty_, k_cache_, v_cache_, qkv_, 1, 1, 0, config.max_seq_len,
                                       config.num_heads, config.num_heads, C / config.num_heads, 0, NFN_F32),
             "attention_kv_cached", error))
    return false;
  reset();
  return true;
}

bool GPTDecoder::alloc_caches(int slots, std::string* error) {
  if (k_cache_) ops_->free(ctx_, k_cache_);
  k_cache_ = v_cache_ = nullptr;
  const size_t cache = static_cast<size_t>(slots) * config_.num_layers * config_.max_seq_len * config_.channels;
  void* kv = nullptr;
  if (!check(ops_->alloc(ctx_, 2 * cache * 4, &kv), "allocating the KV cache", error)) return false;
  k_cache_ = static_cast<float*>(kv);
  v_cache_ = k_cache_ + cache;
  return true;
}

bool GPTDecoder::ensure_rows(int n, std::string* error) {
  const size_t C = config_.channels;
  if (n <= cap_rows_) return true;
  if (act_block_) ops_->free(ctx_, act_block_);
  act_block_ = nullptr;
  cap_rows_ = 0;
  const size_t N = n;
  const std::vector<ArenaSlot> plan = {
      {reinterpret_cast<void**>(&tokens_), N * 4},  {reinterpret_cast<void**>(&targets_), N * 4},
      {reinterpret_cast<void**>(&x_), N * C * 4},   {reinterpret_cast<void**>(&ln_), N * C * 4},
      {reinterpret_cast<void**>(&mean_), N * 4},    {reinterpret_cast<void**>(&rstd_), N * 4},
      {reinterpret_cast<void**>(&qkv_), N * 3 * C * 4}, {reinterpret_cast<void**>(&atty_), N * C * 4},
      {reinterpret_cast<void**>(&fch_), N * 4 * C * 4},
      {reinterpret_cast<void**>(&fch_gelu_), N * 4 * C * 4}, {reinterpret_cast<void**>(&losses_), N * 4},
  };
  if (!alloc_arena(*ops_, ctx_, plan, "allocating activations", &act_block_, error)) return false;
  cap_rows_ = n;
  return true;
}

// The forward of n rows (tokens_ uploaded) made of parts, each at its slot's positions.
bool GPTDecoder::run(const std::vector<PlacedRows>& parts, int n, std::string* error) {
  const GPTConfig& g = config_;
  const int C = g.channels, NH = g.num_heads, maxT = g.max_seq_len;
  const size_t cache_layer = static_cast<size_t>(maxT) * C;
  const nfn_op_table& o = *ops_;
  for (const PlacedRows& r : parts) {  // each part's learned positions from its slot's
    const float* wpe = static_cast<const float*>(param(WPE)) + static_cast<size_t>(r.pos) * C;
    if (!check(o.embedding_forward(ctx_, x_ + static_cast<size_t>(r.row0) * C, tokens_ + r.row0, param(WTE), wpe, 1,
                                   r.n, C, NFN_F32), "embedding_forward", error))
      return false;
  }
  for (int l = 0; l < g.num_layers; ++l) {
    // The same op sequence as the training forward (cc/model/gpt.cc), with the cached
    // attention in place of the full one; x_ is the residual stream, updated in place.
    bool ok =
        check(o.layernorm_forward(ctx_, ln_, mean_, rstd_, x_, param(LN1W, l), param(LN1B, l), n, C, NFN_F32),
              "layernorm_forward (ln1)", error) &&
        check(o.linear_forward(ctx_, qkv_, nullptr, ln_, param(QKVW, l), param(QKVB, l), nullptr, n, C, 3 * C,
                               NFN_EPILOGUE_NONE, NFN_F32), "linear_forward (qkv)", error);
    for (size_t i = 0; ok && i < parts.size(); ++i) {  // attention over each part's own cache
      const PlacedRows& r = parts[i];
      const size_t cache = (static_cast<size_t>(r.slot) * g.num_layers + l) * cache_layer;
      ok = check(o.attention_kv_cached(ctx_, atty_ + static_cast<size_t>(r.row0) * C, k_cache_ + cache,
                                       v_cache_ + cache, qkv_ + static_cast<size_t>(r.row0) * 3 * C, 1, r.n, r.pos,
                                       maxT, NH, NH, C / NH, 0, NFN_F32), "attention_kv_cached", error);
    }
    ok = ok &&
         check(o.linear_forward(ctx_, x_, nullptr, atty_, param(ATTPROJW, l), param(ATTPROJB, l), x_, n, C, C,
                                NFN_EPILOGUE_NONE, NFN_F32), "linear_forward (attproj)", error) &&
         check(o.layernorm_forward(ctx_, ln_, mean_, rstd_, x_, param(LN2W, l), param(LN2B, l), n, C, NFN_F32),
               "layernorm_forward (ln2)", error) &&
         check(o.linear_forward(ctx_, fch_gelu_, fch_, ln_, param(FCW, l), param(FCB, l), nullptr, n, C, 4 * C,
                                NFN_EPILOGUE_GELU, NFN_F32), "linear_forward (fc)", error) &&
         check(o.linear_forward(ctx_, x_, nullptr, fch_gelu_, param(FCPROJW, l), param(FCPROJB, l), x_, n, 4 * C, C,
                                NFN_EPILOGUE_NONE, NFN_F32), "linear_forward (fcproj)", error);
    if (!ok) return false;
  }
  return check(o.layernorm_forward(ctx_, ln_, mean_, rstd_, x_, param(LNFW), param(LNFB), n, C, NFN_F32),
               "layernorm_forward (lnf)", error);
}

bool GPTDecoder::losses(const int32_t* targets, std::vector<float>* out, std::string* error) {
  *error = check_targets(*this, rows_, targets);
  if (!error->empty()) return false;
  const int n = rows_, V = config_.vocab_size;
  out->resize(n);
  return check(ops_->copy(ctx_, targets_, targets, static_cast<size_t>(n) * 4, NFN_HOST_TO_DEVICE),
               "uploading targets", error) &&
         check(ops_->lm_head_cross_entropy(ctx_, losses_, nullptr, nullptr, nullptr, ln_, param(WTE), targets_, nullptr, n,
                                           config_.channels, V, config_.padded_vocab_size, 0.f, 0.f, NFN_F32),
               "lm_head_cross_entropy", error) &&
         check(ops_->copy(ctx_, out->data(), losses_, static_cast<size_t>(n) * 4, NFN_DEVICE_TO_HOST), "copy",
               error) &&
         check(ops_->synchronize(ctx_), "synchronize", error);
}

}  // namespace nfn
