#include "cc/model/lora.h"

#include <cmath>

#include "cc/util/rng.h"

namespace nfn {

namespace {

// A layer's adaptable matrices: name (the family's, for the fused ones a name of their own),
// base offset, in, out.
struct Matrix {
  const char* name;
  size_t base;
  int in, out;
};

std::array<Matrix, kLoraMatrices> layer_matrices(const DecoderConfig& c, const DecoderOffsets::Layer& w) {
  const int C = c.channels, QD = c.num_heads * c.head_dim, QKV = QD + 2 * c.num_kv_heads * c.head_dim,
            H = c.hidden, Hf = c.nanochat() ? H : 2 * H;
  if (c.nanochat())
    return {{{"attn.c_qkv", w.qkv, C, QKV}, {"attn.c_proj", w.o, QD, C}, {"mlp.c_fc", w.fc, C, Hf},
             {"mlp.c_proj", w.proj, H, C}}};
  return {{{"self_attn.qkv_proj", w.qkv, C, QKV}, {"self_attn.o_proj", w.o, QD, C}, {"mlp.gate_up_proj", w.fc, C, Hf},
           {"mlp.down_proj", w.proj, H, C}}};
}

bool wanted(const LoraSpec& s, int m) { return m == kLoraQkv || m == kLoraOut ? s.attention : s.mlp; }

}  // namespace

std::string validate_lora(const LoraSpec& s) {
  if (s.rank < 0) return "LoRA rank must be positive";
  if (!(s.alpha > 0) || !std::isfinite(s.alpha)) return "LoRA alpha must be positive";
  if (!s.attention && !s.mlp) return "LoRA needs at least one kind of target (attention or mlp)";
  return "";
}

std::vector<std::array<LoraTarget, kLoraMatrices>> lora_targets(const DecoderConfig& c, const LoraSpec& s) {
  std::vector<std::array<LoraTarget, kLoraMatrices>> out;
  size_t at = 0;
  for (const DecoderOffsets::Layer& w : decoder_offsets(c).layers) {
    std::array<LoraTarget, kLoraMatrices> t{};
    const auto m = layer_matrices(c, w);
    for (int k = 0; k < kLoraMatrices; ++k) {
      t[k] = LoraTarget{wanted(s, k), m[k].base, m[k].in, m[k].out, 0, 0};
      if (!t[k].on) continue;
      t[k].a = at;
      at += static_cast<size_t>(s.rank) * m[k].in;
      t[k].b = at;
      at += static_cast<size_t>(m[k].out) * s.rank;
    }
    out.push_back(t);
  }
  return out;
}

std::vector<DecoderTensor> lora_layout(const DecoderConfig& c, const LoraSpec& s) {
  std::vector<DecoderTensor> out;
  const auto targets = lora_targets(c, s);
  const auto offsets = decoder_offsets(c);
  for (int l = 0; l < c.num_layers; ++l) {
    const auto m = layer_matrices(c, offsets.layers[l]);
    const std::string p = (c.nanochat() ? "transformer.h." : "model.layers.") + std::to_string(l) + ".";
    for (int k = 0; k < kLoraMatrices; ++k) {
      const LoraTarget& t = targets[l][k];
      if (!t.on) continue;
      out.push_back({p + m[k].name + ".lora_A.weight", static_cast<size_t>(s.rank), static_cast<size_t>(t.in), t.a, l,
                     TensorSlot::kLoraA});
      out.push_back({p + m[k].name + ".lora_B.weight", static_cast<size_t>(t.out), static_cast<size_t>(s.rank), t.b, l,
                     TensorSlot::kLoraB});
    }
  }
  return out;
}

size_t lora_num_parameters(const DecoderConfig& c, const LoraSpec& s) {
  const std::vector<DecoderTensor> t = lora_layout(c, s);
  return t.empty() ? 0 : t.back().offset + t.back().count();
}

std::vector<float> lora_random_parameters(const DecoderConfig& c, const LoraSpec& s, uint64_t seed) {
  std::vector<float> w(lora_num_parameters(c, s), 0.f);
  Rng rng(seed);
  for (const DecoderTensor& t : lora_layout(c, s)) {
    if (t.slot != TensorSlot::kLoraA) continue;
    const float bound = 1.f / std::sqrt(static_cast<float>(t.cols));
    for (size_t i = 0; i < t.count(); ++i) w[t.offset + i] = bound * (2.f * rng.uniform() - 1.f);
  }
  return w;
}

nfn_status lora_forward(const nfn_op_table& o, nfn_ctx* ctx, void* y, void* us, const void* x, const void* A,
                        const void* B, int N, int in, int out, int rank, float scale, nfn_dtype dtype) {
  nfn_status s = o.linear_forward(ctx, us, nullptr, x, A, nullptr, nullptr, N, in, rank, NFN_EPILOGUE_NONE, dtype);
  if (s == NFN_OK)
    s = o.scaled_sum_forward(ctx, us, us, us, nullptr, nullptr, scale, 0.f, static_cast<size_t>(N) * rank, dtype);
  if (s == NFN_OK) s = o.linear_forward(ctx, y, nullptr, us, B, nullptr, y, N, rank, out, NFN_EPILOGUE_NONE, dtype);
  return s;
}

nfn_status lora_backward(const nfn_op_table& o, nfn_ctx* ctx, void* dx, void* dA, void* dB, void* du, const void* dy,
                         const void* x, const void* us, const void* A, const void* B, int N, int in, int out,
                         int rank, float scale, nfn_dtype dtype) {
  nfn_status s = o.linear_backward(ctx, du, dB, nullptr, nullptr, dy, us, B, nullptr, N, rank, out, 0, dtype);
  if (s == NFN_OK)
    s = o.scaled_sum_forward(ctx, du, du, du, nullptr, nullptr, scale, 0.f, static_cast<size_t>(N) * rank, dtype);
  if (s == NFN_OK) s = o.linear_backward(ctx, dx, dA, nullptr, nullptr, du, x, A, nullptr, N, in, rank, 1, dtype);
  return s;
}

}  // namespace nfn
