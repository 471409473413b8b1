// The modern decoder's two families as one geometry with switches: nanochat's model (as its
// gpt.py: RMSNorm without weights, QK-norm scaled 1.2, ReLU^2, value embeddings, smear,
// backout, per-layer lambdas, sliding windows, a soft-capped head) and Hugging Face's
// LlamaForCausalLM (weighted RMSNorm, SwiGLU, tied or untied head). The parameter layout
// names each tensor as the family's own checkpoints do, so safetensors files interchange.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace nfn {

enum class DecoderFamily { kNanochat, kLlama };

struct DecoderConfig {
  DecoderFamily family = DecoderFamily::kNanochat;
  int max_seq_len = 256;
  int vocab_size = 256;
  int padded_vocab_size = 256;  // nanochat pads to a multiple of 64; llama keeps its own
  int num_layers = 4;
  int num_heads = 2;
  int num_kv_heads = 2;
  int head_dim = 64;
  int channels = 128;
  int hidden = 512;             // the MLP's width (nanochat 4C; llama's intermediate_size)
  float rope_theta = 100000.f;  // nanochat 100000; llama its checkpoint's rope_theta
  float norm_eps = 1e-5f;
  bool tied_head = false;              // llama's tie_word_embeddings (nanochat never ties)
  std::string window_pattern = "SSSL";  // per layer, tiled; the last layer is always long

  bool nanochat() const { return family == DecoderFamily::kNanochat; }
};

// nanochat's constants.
constexpr int kValueGateChannels = 12;  // the value-embedding gate reads the first 12 channels
constexpr int kSmearGateChannels = 24;  // the smear gate reads the first 24
constexpr float kValueGateScale = 3.f;  // gate = 3 sigmoid(...), in (0, 3)
constexpr float kQkNormScale = 1.2f;
constexpr float kLogitSoftcap = 15.f;

// What an optimizer does with a tensor (nanochat's MuonAdamW groups; llama trains all with AdamW).
enum class TensorRole {
  kEmbedding,       // wte
  kHead,            // lm_head
  kValueEmbedding,  // value_embeds.*
  kMatrix,          // the blocks' linear weights (Muon in nanochat)
  kNormWeight,      // llama's RMSNorm weights
  kResidLambdas,
  kX0Lambdas,
  kSmear,           // smear_gate, smear_lambda, backout_lambda
  kLora,            // LoRA adapters (lora.h)
};

// Which tensor it is, whatever the family calls it: the model finds its tensors by slot.
enum class TensorSlot {
  kEmbedding, kHead, kFinalNorm, kResidLambdas, kX0Lambdas, kSmearGate, kSmearLambda, kBackout,
  kValueTable,  // a layer's value embedding
  kAttnNorm, kQ, kK, kV, kValueGate, kO, kMlpNorm,
  kUp,    // nanochat's c_fc, llama's gate_proj (its up_proj follows: kUpSecond)
  kUpSecond,
  kDown,  // c_proj / down_proj
  kLoraA, kLoraB,  // a LoRA adapter's two factors (lora.h)
};

struct DecoderTensor {
  std::string name;  // the family's checkpoint name, e.g. transformer.h.0.attn.c_q.weight
  size_t rows, cols;  // a vector has rows 1
  size_t offset;      // elements from the start of the parameter block
  int layer;          // the layer of a block tensor or value embedding, else -1
  TensorSlot slot;
  size_t count() const { return rows * cols; }
  TensorRole role() const;
};

// Where the forward finds each tensor, in elements from the start of the parameter block. A
// layer's fused GEMMs start at q (q, k, v) and at its first up projection (llama's gate, then
// up); a tied head is the embedding.
struct DecoderOffsets {
  struct Layer {
    size_t attn_norm = 0, qkv = 0, ve_gate = 0, ve_table = 0, o = 0, mlp_norm = 0, fc = 0, proj = 0;
    bool has_ve = false;
  };
  std::vector<Layer> layers;
  size_t wte = 0, head = 0, final_norm = 0, resid = 0, x0l = 0, smear_gate = 0, smear_lambda = 0, backout = 0;
};
DecoderOffsets decoder_offsets(const DecoderConfig& c);

// A layer's four linear weights as its forward multiplies them (what quantized bases and LoRA
// adapters act on): the fused qkv, the attention output, the MLP's up (llama's gate then up
// rows) and its down; each (rows, cols) = (out, in) from `offset`.
struct DecoderMatrix {
  size_t offset;
  int rows, cols;
};
enum DecoderMatrixKind { kQkvMatrix, kOutMatrix, kUpMatrix, kDownMatrix, kMatrixKinds };
std::array<DecoderMatrix, kMatrixKinds> layer_matrices(const DecoderConfig& c, const DecoderOffsets::Layer& w);

// Every tensor in memory order. Within layer l, q, k and v are adjacent (one fused qkv GEMM)
// and so are llama's gate and up (one fused SwiGLU GEMM).
std::vector<DecoderTensor> decoder_layout(const DecoderConfig& c);
size_t decoder_num_parameters(const DecoderConfig& c);
// "" when usable, else one line naming the field.
std::string validate_decoder(const DecoderConfig& c);
// Whether layer l has a value embedding (alternating, the last layer always).
bool has_value_embedding(int layer, int num_layers);
// The attention window of each layer: 0 for long (the whole context), else nanochat's short
// window, a quarter of max_seq_len rounded up to a multiple of 128. The last layer is long.
std::vector<int> layer_windows(const DecoderConfig& c);
// The vocabulary rounded up to a multiple of 64 (nanochat's padding).
int pad_vocab_64(int vocab_size);
const char* decoder_family_name(DecoderFamily f);

}  // namespace nfn
