// LoRA: low-rank adapters on a decoder's block matrices over a frozen base. Each adapted
// matrix W (out, in) gains y += (alpha / rank) (x A^T) B^T, A (rank, in) and B (out, rank); the
// base's fused matrices are adapted as one (a layer's q, k and v together; llama's gate and up
// together). A starts uniform in +-1/sqrt(in) (PEFT's Kaiming init), B at zero, so training
// starts from the base model exactly.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cc/model/decoder_config.h"
#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

struct LoraSpec {
  int rank = 0;       // 0: no adapters (the whole model trains)
  float alpha = 0.f;  // the update's scale is alpha / rank
  bool attention = true, mlp = true;  // which matrices: qkv and output; up and down
  int quant = -1;     // the base's block matrices kept quantized (QLoRA): a quant::Type, or -1
  bool on() const { return rank > 0; }
  float scale() const { return alpha / static_cast<float>(rank); }
};

// A layer's four adaptable matrices, in this order.
enum LoraMatrix { kLoraQkv = kQkvMatrix, kLoraOut = kOutMatrix, kLoraUp = kUpMatrix, kLoraDown = kDownMatrix,
                  kLoraMatrices = kMatrixKinds };

struct LoraTarget {
  bool on = false;
  size_t base;   // the matrix's offset in decoder_layout
  int in, out;
  size_t a, b;   // A's and B's offsets in lora_layout
};

// The adapters' tensors in memory order (a layer's targets in LoraMatrix order, A then B),
// named after their matrix: model.layers.0.self_attn.qkv_proj.lora_A.weight, ...
std::vector<DecoderTensor> lora_layout(const DecoderConfig& c, const LoraSpec& spec);
size_t lora_num_parameters(const DecoderConfig& c, const LoraSpec& spec);
std::vector<std::array<LoraTarget, kLoraMatrices>> lora_targets(const DecoderConfig& c, const LoraSpec& spec);
// A uniform in +-1/sqrt(in) from `seed`, B zero.
std::vector<float> lora_random_parameters(const DecoderConfig& c, const LoraSpec& spec, uint64_t seed);
// "" when usable, else one line naming the field.
std::string validate_lora(const LoraSpec& spec);
// The whole model the adapters make with their base (decoder_layout's f32 values): each adapted
// matrix W + (alpha/rank) B A, over the base a QLoRA run holds (its block matrices rounded
// through the quantizer) when the spec quantizes it.
std::vector<float> lora_merged(const DecoderConfig& c, const LoraSpec& spec, std::vector<float> base,
                               const std::vector<float>& adapters);

// y (N, out) += scale (x A^T) B^T, keeping us = scale x A^T (N, rank) for the backward.
nfn_status lora_forward(const nfn_op_table& o, nfn_ctx* ctx, void* y, void* us, const void* x, const void* A,
                        const void* B, int N, int in, int out, int rank, float scale, nfn_dtype dtype);
// From dy: dB += dy^T us, dA += (scale dy B)^T x, and dx += scale dy B A. du (N, rank) is scratch.
nfn_status lora_backward(const nfn_op_table& o, nfn_ctx* ctx, void* dx, void* dA, void* dB, void* du, const void* dy,
                         const void* x, const void* us, const void* A, const void* B, int N, int in, int out,
                         int rank, float scale, nfn_dtype dtype);

}  // namespace nfn
