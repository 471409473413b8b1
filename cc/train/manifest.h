// The manifest beside the weights: what the model is (family, template, geometry), what it
// was trained on (tokenizer, dataset name and sequence length, never the text) and which
// weights file holds it. --graph-file reads it back as the architecture's source of truth.
#pragma once

#include <cstdint>
#include <string>

#include "cc/train/train_config.h"

namespace nfn {

constexpr const char* kManifestFormat = "nfn.manifest";
constexpr int kManifestVersion = 1;

// Each checkpoint's DONE marker holds its manifest, and manifest.json is a copy of the newest
// one's, so a checkpoint carries its own description (data, tokenizer) and its run's id
// wherever it is named from. Markers from before run ids are empty.
// run_id: the run that wrote the weights; shards: what its training shards were (shard_list).
Json manifest_json(const TrainConfig& c, const std::string& weights_file, int step, size_t parameters,
                   const std::string& run_id, const std::string& shards);

// The JSON object in `path`, or null when it is absent, empty or not an object (a marker from
// before run ids is empty).
Json read_object(const std::string& path);

// A fresh run's id: 16 hex digits from the system's random source. A resumed run keeps the id
// of the checkpoint it continues.
std::string new_run_id();
// What `step`'s DONE marker in `dir` says of the run that wrote it, read once. Markers from
// before run ids (empty) say nothing.
struct Marker {
  std::string run_id;     // "" where it names none
  std::string shards;     // the training shards it read, as shard_list ("" where it names none)
  bool has_seed = false;  // and its seed (its data order)
  uint64_t seed = 0;
  Json training;          // its "training" object (the schedule it ran), null where it has none
  std::string packing = "contiguous";  // how its rows were cut (a marker naming none: contiguous)
  int packing_buffer = 0;              // best fit's buffer in documents (0 where it names none)
  int moment_steps = 0;                // steps its warm start's moments held (0 where it names none)
  Json manifest;          // the whole marker, null where it is empty (from before run ids)
};
Marker read_marker(const std::string& dir, int step);
// Where the schedule a marker's run trained with differs from c's ("" where it does not, or
// the marker records none): "learning_rate 0.0006 -> 0.0003, warmup_steps 60 -> 700", for the
// tokens a step, learning rate, warmup, final fraction, weight decay and steps. A marker from
// before final_lr_fraction decayed to zero.
std::string schedule_differences(const Json& training, const TrainConfig& c);
// The newest complete step in `dir` at or below `max_step` that run `run_id` wrote (a marker
// from before run ids counts for any run); -1 if none. need_state: as complete_steps.
int newest_step_of_run(const std::string& dir, const std::string& run_id, int max_step, bool need_state = true);

// The checkpoint that `--resume auto` (and `--resume DIR`) continues in `dir`: the step its
// manifest.json names, the last checkpoint written there, or, where the run that wrote it
// stopped before that step's marker, that run's newest complete step below it. A manifest
// from before run ids, or none: the newest complete step of any run. need_state false: the
// same choice among the steps whose model is whole without the optimizer's state (sampling,
// `nfn infer --checkpoint DIR`).
struct ResumeChoice {
  int step = -1;          // -1: none
  int newest_any = -1;    // the newest complete step of any run (-1: none)
  std::string run_id;     // the manifest's ("" where it names none)
  int manifest_step = -1;
};
ResumeChoice choose_resume(const std::string& dir, bool need_state = true);
// Reads family, template and geometry (and tokenizer/dataset when present) into *c.
bool read_manifest(const std::string& path, TrainConfig* c, std::string* error);

}  // namespace nfn
