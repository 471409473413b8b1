// Where a run starts: fresh, or the checkpoint --resume names (auto: the one the output
// directory's manifest names), checked against the run's model before anything is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/data/token_shards.h"
#include "cc/train/family.h"
#include "cc/train/train_config.h"

namespace nfn {

struct Start {
  int step = 0;
  std::string run_id;  // a fresh run's new id, or the id of the run it resumes
  std::string shards;  // the training shards its run read, as shard_list ("" where unknown)
  bool has_seed = false;  // and its seed (its data order), where the marker records it
  uint64_t seed = 0;
  std::string from;  // checkpoint model file resumed from ("" when fresh)
  std::string state_path;  // and its state file
  TrainState state;  // its fields; the moments stay in the file until the model exists
  std::string schedule_changes;  // how its run's schedule differs from this run's ("" when not)
};

bool resolve_resume(const TrainConfig& c, const ModelFamily& family, Start* s, std::string* error);

// For the plan: the checkpoint --resume names, as {"model_file", "step", "manifest"} (its
// DONE marker's manifest, else the directory's manifest.json), file and step null where it
// names no complete checkpoint (the run says why, or starts fresh); null without --resume.
Json resume_choice_json(const TrainConfig& c);

// What a run's training shards are, however they were named (a folder, its one file, a link,
// a copy): "name:tokens" of each, sorted by name, joined by commas. The checkpoint's data
// position is a place in these.
std::string shard_list(const std::vector<data::TokenShard>& shards);
// Whether two shard lists name the same shards, whatever dataset prefix their files carry
// (shards were once all named fineweb_*; a cache entry rebuilt since names them after its
// dataset).
bool same_shards(const std::string& a, const std::string& b);

}  // namespace nfn
