#include "cc/model/decoder_config.h"

#include <cmath>

namespace nfn {

const char* decoder_family_name(DecoderFamily f) { return f == DecoderFamily::kNanochat ? "nanochat" : "llama"; }

int pad_vocab_64(int vocab_size) { return (vocab_size + 63) / 64 * 64; }

bool has_value_embedding(int layer, int num_layers) { return layer % 2 == (num_layers - 1) % 2; }

std::vector<int> layer_windows(const DecoderConfig& c) {
  // A quarter of the context; from 512 up rounded to flash attention's 128-row tiles as
  // nanochat rounds it (2048 -> 512), so tiny test contexts still get a real window.
  int quarter = (c.max_seq_len + 3) / 4;
  if (c.max_seq_len >= 512) quarter = (quarter + 127) / 128 * 128;
  std::vector<int> w(c.num_layers, 0);
  for (int l = 0; l + 1 < c.num_layers; ++l)
    if (c.window_pattern[l % c.window_pattern.size()] == 'S') w[l] = quarter;
  return w;
}

std::string validate_decoder(const DecoderConfig& c) {
  auto positive = [](int v) { return v > 0; };
  if (!positive(c.max_seq_len)) return "max_seq_len must be positive";
  if (!positive(c.vocab_size) || c.padded_vocab_size < c.vocab_size)
    return "vocab_size must be positive and padded_vocab_size at least vocab_size";
  if (!positive(c.num_layers)) return "num_layers must be positive";
  if (!positive(c.num_heads) || !positive(c.num_kv_heads)) return "num_heads and num_kv_heads must be positive";
  if (c.num_heads % c.num_kv_heads != 0)
    return "num_kv_heads " + std::to_string(c.num_kv_heads) + " does not divide num_heads " +
           std::to_string(c.num_heads);
  if (!positive(c.head_dim) || c.head_dim % 2 != 0) return "head_dim must be positive and even (rotary pairs)";
  if (!positive(c.channels) || !positive(c.hidden)) return "channels and hidden must be positive";
  if (c.nanochat() && c.channels != c.num_heads * c.head_dim)
    return "channels " + std::to_string(c.channels) + " must be num_heads x head_dim (" +
           std::to_string(c.num_heads) + " x " + std::to_string(c.head_dim) + ")";
  if (c.nanochat() && c.channels < kSmearGateChannels)
    return "channels must be at least " + std::to_string(kSmearGateChannels) + " (the smear gate's input)";
  if (c.nanochat() && c.tied_head) return "nanochat never ties its LM head to the embedding";
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) return "rope_theta must be positive";
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps)) return "norm_eps must be positive";
  if (c.window_pattern.empty()) return "window_pattern is empty";
  for (char ch : c.window_pattern)
    if (ch != 'S' && ch != 'L')
      return "window_pattern " + c.window_pattern + " has a letter other than S (short) and L (long)";
  return "";
}

std::vector<DecoderTensor> decoder_layout(const DecoderConfig& c) {
  std::vector<DecoderTensor> t;
  size_t offset = 0;
  auto add = [&](const std::string& name, size_t rows, size_t cols, int layer, TensorSlot slot) {
    t.push_back({name, rows, cols, offset, layer, slot});
    offset += rows * cols;
  };
  const size_t C = c.channels, V = c.padded_vocab_size, L = c.num_layers, H = c.hidden;
  const size_t QD = static_cast<size_t>(c.num_heads) * c.head_dim, KD = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  const bool nano = c.nanochat();
  add(nano ? "transformer.wte.weight" : "model.embed_tokens.weight", V, C, -1, TensorSlot::kEmbedding);
  if (nano) {
    add("resid_lambdas", 1, L, -1, TensorSlot::kResidLambdas);
    add("x0_lambdas", 1, L, -1, TensorSlot::kX0Lambdas);
    add("smear_gate.weight", 1, kSmearGateChannels, -1, TensorSlot::kSmearGate);
    add("smear_lambda", 1, 1, -1, TensorSlot::kSmearLambda);
    add("backout_lambda", 1, 1, -1, TensorSlot::kBackout);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = (nano ? "transformer.h." : "model.layers.") + std::to_string(l) + ".";
    if (nano) {
      add(p + "attn.c_q.weight", QD, C, l, TensorSlot::kQ);
      add(p + "attn.c_k.weight", KD, C, l, TensorSlot::kK);
      add(p + "attn.c_v.weight", KD, C, l, TensorSlot::kV);
      if (has_value_embedding(l, c.num_layers))
        add(p + "attn.ve_gate.weight", c.num_kv_heads, kValueGateChannels, l, TensorSlot::kValueGate);
      add(p + "attn.c_proj.weight", C, QD, l, TensorSlot::kO);
      add(p + "mlp.c_fc.weight", H, C, l, TensorSlot::kUp);
      add(p + "mlp.c_proj.weight", C, H, l, TensorSlot::kDown);
    } else {
      add(p + "input_layernorm.weight", 1, C, l, TensorSlot::kAttnNorm);
      add(p + "self_attn.q_proj.weight", QD, C, l, TensorSlot::kQ);
      add(p + "self_attn.k_proj.weight", KD, C, l, TensorSlot::kK);
      add(p + "self_attn.v_proj.weight", KD, C, l, TensorSlot::kV);
      add(p + "self_attn.o_proj.weight", C, QD, l, TensorSlot::kO);
      add(p + "post_attention_layernorm.weight", 1, C, l, TensorSlot::kMlpNorm);
      add(p + "mlp.gate_proj.weight", H, C, l, TensorSlot::kUp);
      add(p + "mlp.up_proj.weight", H, C, l, TensorSlot::kUpSecond);
      add(p + "mlp.down_proj.weight", C, H, l, TensorSlot::kDown);
    }
  }
  if (nano) {
    for (int l = 0; l < c.num_layers; ++l)
      if (has_value_embedding(l, c.num_layers))
        add("value_embeds." + std::to_string(l) + ".weight", V, KD, l, TensorSlot::kValueTable);
  } else {
    add("model.norm.weight", 1, C, -1, TensorSlot::kFinalNorm);
  }
  if (!c.tied_head) add("lm_head.weight", V, C, -1, TensorSlot::kHead);
  return t;
}

TensorRole DecoderTensor::role() const {
  switch (slot) {
    case TensorSlot::kEmbedding: return TensorRole::kEmbedding;
    case TensorSlot::kHead: return TensorRole::kHead;
    case TensorSlot::kValueTable: return TensorRole::kValueEmbedding;
    case TensorSlot::kFinalNorm:
    case TensorSlot::kAttnNorm:
    case TensorSlot::kMlpNorm: return TensorRole::kNormWeight;
    case TensorSlot::kResidLambdas: return TensorRole::kResidLambdas;
    case TensorSlot::kX0Lambdas: return TensorRole::kX0Lambdas;
    case TensorSlot::kSmearGate:
    case TensorSlot::kSmearLambda:
    case TensorSlot::kBackout: return TensorRole::kSmear;
    case TensorSlot::kLoraA:
    case TensorSlot::kLoraB: return TensorRole::kLora;
    default: return TensorRole::kMatrix;  // the blocks' linear weights, the value gates among them
  }
}

size_t decoder_num_parameters(const DecoderConfig& c) {
  const std::vector<DecoderTensor> t = decoder_layout(c);
  return t.back().offset + t.back().count();
}

DecoderOffsets decoder_offsets(const DecoderConfig& c) {
  DecoderOffsets o;
  o.layers.assign(c.num_layers, DecoderOffsets::Layer{});
  for (const DecoderTensor& t : decoder_layout(c)) {
    DecoderOffsets::Layer* x = t.layer >= 0 ? &o.layers[t.layer] : nullptr;
    switch (t.slot) {
      case TensorSlot::kEmbedding: o.wte = t.offset; break;
      case TensorSlot::kHead: o.head = t.offset; break;
      case TensorSlot::kFinalNorm: o.final_norm = t.offset; break;
      case TensorSlot::kResidLambdas: o.resid = t.offset; break;
      case TensorSlot::kX0Lambdas: o.x0l = t.offset; break;
      case TensorSlot::kSmearGate: o.smear_gate = t.offset; break;
      case TensorSlot::kSmearLambda: o.smear_lambda = t.offset; break;
      case TensorSlot::kBackout: o.backout = t.offset; break;
      case TensorSlot::kValueTable: x->ve_table = t.offset, x->has_ve = true; break;
      case TensorSlot::kAttnNorm: x->attn_norm = t.offset; break;
      case TensorSlot::kQ: x->qkv = t.offset; break;
      case TensorSlot::kValueGate: x->ve_gate = t.offset; break;
      case TensorSlot::kO: x->o = t.offset; break;
      case TensorSlot::kMlpNorm: x->mlp_norm = t.offset; break;
      case TensorSlot::kUp: x->fc = t.offset; break;
      case TensorSlot::kDown: x->proj = t.offset; break;
      default: break;  // k, v and llama's up follow q and the gate
    }
  }
  if (c.tied_head) o.head = o.wte;
  return o;
}

std::array<DecoderMatrix, kMatrixKinds> layer_matrices(const DecoderConfig& c, const DecoderOffsets::Layer& w) {
  const int C = c.channels, QD = c.num_heads * c.head_dim, QKV = QD + 2 * c.num_kv_heads * c.head_dim,
            H = c.hidden, Hf = c.nanochat() ? H : 2 * H;
  return {{{w.qkv, QKV, C}, {w.o, C, QD}, {w.fc, Hf, C}, {w.proj, C, H}}};
}

}  // namespace nfn
