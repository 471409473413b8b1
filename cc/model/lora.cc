#include "cc/model/lora.h"

#include <cmath>

#include "cc/util/quant.h"
#include "cc/util/rng.h"

namespace nfn {

namespace {

// The names of a layer's adaptable matrices (the family's, for the fused ones a name of their
// own), in DecoderMatrixKind order.
std::array<const char*, kLoraMatrices> matrix_names(const DecoderConfig& c) {
  if (c.nanochat()) return {"attn.c_qkv", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  return {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"};
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
      t[k] = LoraTarget{wanted(s, k), m[k].offset, m[k].cols, m[k].rows, 0, 0};
      if (!t[k].on) continue;
      t[k].a = at;
      at += static_cast<size_t>(s.rank) * t[k].in;
      t[k].b = at;
      at += static_cast<size_t>(t[k].out) * s.rank;
    }
    out.push_back(t);
  }
  return out;
}

std::vector<DecoderTensor> lora_layout(const DecoderConfig& c, const LoraSpec& s) {
  std::vector<DecoderTensor> out;
  const auto targets = lora_targets(c, s);
  const auto names = matrix_names(c);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = (c.nanochat() ? "transformer.h." : "model.layers.") + std::to_string(l) + ".";
    for (int k = 0; k < kLoraMatrices; ++k) {
      const LoraTarget& t = targets[l][k];
      if (!t.on) continue;
      out.push_back({p + names[k] + ".lora_A.weight", static_cast<size_t>(s.rank), static_cast<size_t>(t.in), t.a, l,
                     TensorSlot::kLoraA});
      out.push_back({p + names[k] + ".lora_B.weight", static_cast<size_t>(t.out), static_cast<size_t>(s.rank), t.b, l,
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

std::vector<float> lora_merged(const DecoderConfig& c, const LoraSpec& s, std::vector<float> base,
                              const std::vector<float>& adapters) {
  if (s.quant >= 0)  // the base as a QLoRA run holds it
    for (const DecoderOffsets::Layer& w : decoder_offsets(c).layers)
      for (const DecoderMatrix& m : layer_matrices(c, w)) {
        if (m.cols % quant::kBlock != 0) continue;
        const size_t n = static_cast<size_t>(m.rows) * m.cols;
        std::vector<uint8_t> blocks(quant::bytes_of(s.quant, n));
        quant::quantize(s.quant, base.data() + m.offset, n, blocks.data());
        quant::dequantize(s.quant, blocks.data(), n, base.data() + m.offset);
      }
  const float scale = s.scale();
  for (const auto& layer : lora_targets(c, s))
    for (const LoraTarget& t : layer) {
      if (!t.on) continue;
      const float* A = adapters.data() + t.a;  // (rank, in)
      const float* B = adapters.data() + t.b;  // (out, rank)
      for (int i = 0; i < t.out; ++i)
        for (int j = 0; j < t.in; ++j) {
          double sum = 0;
          for (int k = 0; k < s.rank; ++k) sum += static_cast<double>(B[i * s.rank + k]) * A[k * t.in + j];
          base[t.base + static_cast<size_t>(i) * t.in + j] += static_cast<float>(scale * sum);
        }
    }
  return base;
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
