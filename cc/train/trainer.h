// The training loop: data, model, AdamW with clipping, warmup + cosine schedule,
// validation, checkpoints with resume, and the final report.
#pragma once

#include "cc/train/train_config.h"

namespace nfn {

// Runs training (or prints the plan for a dry run). Returns the process exit code:
// 0 done, 1 bad input or setup failure (one line on stderr), 3 non-finite loss.
int run_training(const TrainConfig& config);

}  // namespace nfn
