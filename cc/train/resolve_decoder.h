// The decoder families' (nanochat, llama) geometry and recipe from flags: nanochat's --depth,
// the demo sizes, and the geometry flags over them.
#pragma once

#include <string>

#include "cc/model/decoder_weights.h"  // decoder_geometry_json
#include "cc/train/train_config.h"
#include "cc/util/flags.h"
#include "cc/util/json.h"

namespace nfn {

// Fills c->decoder (and c->model's shared fields); *recipe: whether --depth chose the schedule.
bool resolve_decoder_model(const Flags& f, TrainConfig* c, bool* recipe, std::string* error);
// The schedule's defaults: nanochat's base_train recipe for --depth, the CPU demo's otherwise.
void default_decoder_schedule(bool recipe, TrainConfig* c);

}  // namespace nfn
