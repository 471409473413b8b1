// A run's checkpoints: written (model file, state file, a best-fit run's packing state,
// manifest.json, then the DONE marker last) and read back into the model for a resume.
#pragma once

#include <string>

#include "cc/data/batch_sampler.h"
#include "cc/train/family.h"
#include "cc/train/resume.h"
#include "cc/train/train_config.h"
#include "cc/util/rng.h"

namespace nfn {

bool save_checkpoint(const TrainConfig& c, ModelFamily& family, int step, const std::string& run_id, const Rng& rng,
                     const data::BatchSampler& sampler, std::string* model_path, std::string* error);

// The resumed checkpoint's weights, moments and (where the state keeps them) f32 master
// weights, loaded into the model.
bool load_checkpoint(const Start& start, ModelFamily& family, std::string* error);

// A warm start's optimizer (--init-optimizer): the AdamW moments of `state_path` and, where it
// keeps them, its f32 master weights (the exact weights its bf16 model file rounds), loaded into
// the model; *moment_steps: the steps those moments hold (its step, plus those its own run
// began with, as its marker says).
bool load_init_optimizer(const std::string& state_path, ModelFamily& family, int* moment_steps, std::string* error);

}  // namespace nfn
