// Where a run starts: fresh, or the checkpoint --resume names (auto: the one the output
// directory's manifest names), checked against the run's model before anything is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/ckpt/packing_state.h"
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
  std::string packing = "contiguous";  // how its run cut rows (its marker's)
  int packing_buffer = 0;              // and best fit's buffer (0 where the marker names none)
  std::string packing_path;            // a best-fit checkpoint's packing state file
  PackingState packing_state;          // and what it holds
  int moment_steps = 0;  // steps the moments held before its run began (a warm start's; marker)
  std::string schedule_changes;  // how its run's schedule differs from this run's ("" when not)
};

bool resolve_resume(const TrainConfig& c, const ModelFamily& family, Start* s, std::string* error);

// A resumed run reads its data in its run's order (seed) and cuts rows as its run did (packing
// and best fit's buffer), unless --seed, --packing or --packing-buffer names another.
void keep_resumed_data_order(const Start& start, TrainConfig* c);
// Tells on stderr how a resume that names another packing (or best-fit buffer) than its
// checkpoint's run reads on, from the same data position.
void tell_packing_changes(const TrainConfig& c, const Start& start);

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
