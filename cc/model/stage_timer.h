// The parts of a training step a profile tells apart, and the timer a model reports them
// to. A model with a timer attached calls mark() where one part of its work ends; one
// without calls nothing. The timer (cc/train/stage_timing.h) puts an event there, so the
// work issued between two marks is the stage the second one names.
#pragma once

namespace nfn {

// In the order a step meets them. kData: the next batch read on the host and its tokens
// uploaded; kLmHead: the final norm, the LM head and loss, and their backward (into the
// residual stream's gradient); kOptimizer: zeroing the gradients and the loss, the gradient
// norm and AdamW. A block's backward stage holds the forward work it reruns (--recompute).
enum class Stage {
  kData,
  kEmbedding,
  kAttentionForward,
  kMlpForward,
  kLmHead,
  kMlpBackward,
  kAttentionBackward,
  kOptimizer,
};
constexpr int kNumStages = 8;

// The stage's name in reports: data, embedding, attention_forward, mlp_forward, lm_head,
// mlp_backward, attention_backward, optimizer.
inline const char* stage_name(Stage s) {
  static const char* const names[kNumStages] = {"data",         "embedding",          "attention_forward",
                                                "mlp_forward",  "lm_head",            "mlp_backward",
                                                "attention_backward", "optimizer"};
  return names[static_cast<int>(s)];
}

// Whether a stage is one block's (reported per layer as well).
inline bool block_stage(Stage s) {
  return s == Stage::kAttentionForward || s == Stage::kMlpForward || s == Stage::kMlpBackward ||
         s == Stage::kAttentionBackward;
}

class StageTimer {
 public:
  virtual ~StageTimer() = default;
  // The work issued since the previous mark is `stage`'s, of block `layer` (-1 for the stages
  // that are not a block's).
  virtual void mark(Stage stage, int layer = -1) = 0;
};

}  // namespace nfn
