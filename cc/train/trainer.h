// The training loop: data, model, AdamW with clipping, warmup + cosine schedule,
// validation, checkpoints with resume, and the final report.
#pragma once

#include <string>

#include "cc/train/train_config.h"

namespace nfn {

// Runs training (or prints the plan for a dry run). Returns the process exit code:
// 0 done, 1 bad input or setup failure (one line on stderr), 3 non-finite loss.
int run_training(const TrainConfig& config);

// What a run checks before it reads data (the checkpoint to resume, the output directory, the
// op library and the options given to it, attention at the model's geometry), without
// training: 0, or the exit code a run would stop with (2 for a flag the library refuses) and
// the message. `nfn train` asks it through nfn._native before it prepares a dataset.
int check_training(const TrainConfig& config, std::string* error);

}  // namespace nfn
