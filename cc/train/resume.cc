#include "cc/train/resume.h"

#include <algorithm>
#include <cstdio>

#include "cc/train/find_checkpoint.h"
#include "cc/train/manifest.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

// The step `--resume auto` or `--resume DIR` continues in dir; -1 for a fresh start (auto
// with nothing there).
bool step_in_directory(const TrainConfig& c, const std::string& dir, int* step, std::string* error) {
  const ResumeChoice r = choose_resume(dir);
  *step = r.step;
  if (r.step < 0 && r.newest_any >= 0) {  // another run's complete checkpoints only: which to continue is the user's
    *error = "--resume " + c.resume + ": the run that last wrote " + join_path(dir, "manifest.json") + " (run_id " +
             r.run_id + ", step " + std::to_string(r.manifest_step) + ") left no complete checkpoint, and " +
             join_path(dir, model_file_name(r.newest_any)) +
             " is another run's: name it with --resume to continue that run, or leave --resume out to start afresh";
    return false;
  }
  if (r.step < 0 && c.resume != "auto") {
    *error = "--resume " + c.resume + ": no complete checkpoint (model, state and DONE marker) in that directory";
    return false;
  }
  return true;
}

// The step of `--resume DIR/model_%08d.bin`, whose checkpoint must be complete.
bool step_of_file(const std::string& path, int* step, std::string* error) {
  *step = model_step(path.substr(path.find_last_of('/') + 1));
  if (*step < 0) {
    *error = "--resume " + path + ": expected auto, a checkpoint directory or a model_%08d.bin file";
    return false;
  }
  if (!path_exists(path)) {
    *error = "--resume " + path + ": no such file";
    return false;
  }
  if (!path_exists(join_path(dir_name(path), done_file_name(*step)))) {
    *error = "--resume " + path + ": checkpoint is incomplete (no " + done_file_name(*step) + " beside it)";
    return false;
  }
  return true;
}

// A best-fit checkpoint's packing state, which its marker says it has (written before it).
bool read_packing(const Marker& marker, const std::string& dir, int step, Start* s, std::string* error) {
  s->packing = marker.packing;
  s->packing_buffer = marker.packing_buffer;
  if (marker.packing == "contiguous") return true;
  if (marker.packing != "bestfit") {
    *error = join_path(dir, done_file_name(step)) + ": training.packing " + marker.packing +
             " (contiguous or bestfit are known)";
    return false;
  }
  s->packing_path = join_path(dir, packing_file_name(step));
  if (!read_packing_file(s->packing_path, &s->packing_state, error)) return false;
  if (s->packing_state.step != step) {
    *error = s->packing_path + ": step " + std::to_string(s->packing_state.step) + " in a checkpoint of step " +
             std::to_string(step);
    return false;
  }
  return true;
}

}  // namespace

bool resolve_resume(const TrainConfig& c, const ModelFamily& family, Start* s, std::string* error) {
  s->run_id = new_run_id();
  if (c.resume.empty()) return true;
  std::string dir = c.output_dir;
  int step = -1;
  if (c.resume == "auto" || is_directory(c.resume)) {
    if (c.resume != "auto") dir = c.resume;
    if (!step_in_directory(c, dir, &step, error)) return false;
    if (step < 0) return true;  // nothing to resume: start fresh
  } else {
    dir = dir_name(c.resume);
    if (!step_of_file(c.resume, &step, error)) return false;
  }
  const std::string model_path = join_path(dir, model_file_name(step));
  if (!family.check_weights_file(model_path, "checkpoint", error)) return false;
  if (step > c.max_steps) {
    *error = model_path + ": its step " + std::to_string(step) + " is past --max-steps " +
             std::to_string(c.max_steps) + " (raise --max-steps to train on from it)";
    return false;
  }
  s->state_path = join_path(dir, state_file_name(step));
  if (!read_state_header(s->state_path, &s->state, error)) return false;
  if (s->state.num_parameters != family.num_parameters() || s->state.step != step) {
    *error = s->state_path + ": does not belong to " + model_path;
    return false;
  }
  s->step = step;
  const Marker marker = read_marker(dir, step);
  if (!marker.run_id.empty()) s->run_id = marker.run_id;  // else: from before run ids
  s->shards = marker.shards;
  s->has_seed = marker.has_seed;
  s->seed = marker.seed;
  s->moment_steps = marker.moment_steps;
  s->schedule_changes = schedule_differences(marker.training, c);
  s->from = model_path;
  return read_packing(marker, dir, step, s, error);
}

Json resume_choice_json(const TrainConfig& c) {
  if (c.resume.empty()) return Json();
  const std::string spec = c.resume == "auto" ? c.output_dir : c.resume;
  FoundCheckpoint found;
  std::string manifest, error;
  const bool complete = find_checkpoint(spec, /*for_resume=*/true, "", &found, &error) && found.kind == "llmc";
  if (complete) {
    manifest = found.manifest;
  } else if (is_directory(spec)) {  // a run that stopped before its first checkpoint
    if (path_exists(join_path(spec, "manifest.json"))) manifest = join_path(spec, "manifest.json");
  } else if (model_step(spec.substr(spec.find_last_of('/') + 1)) >= 0) {
    manifest = manifest_of(spec);  // a checkpoint not written (completely) yet: its directory's
  }
  Json m;
  std::string text;
  if (manifest.empty() || !read_file(manifest, &text, &error) || !Json::parse(text, &m, &error)) m = Json();
  Json out = Json::object();
  out.set("model_file", complete ? Json(found.path) : Json());
  out.set("step", complete ? Json(found.step) : Json());
  out.set("manifest", m);
  return out;
}

// Tells how a resume that names another packing (or best-fit buffer) than its checkpoint's run
// reads on: from the same stream position either way.
void tell_packing_changes(const TrainConfig& c, const Start& start) {
  if (start.packing != c.packing) {
    const std::string skipped = std::to_string(start.packing_state.buffered.size());
    const std::string how = c.packing == "bestfit"
                                ? "best-fit rows from the first document start at its data position on"
                                : "contiguous windows from its data position on; the " + skipped +
                                      " documents its best-fit buffer held are skipped";
    std::fprintf(stderr, "nfn: resuming a --packing %s run's checkpoint with --packing %s: %s\n",
                 start.packing.c_str(), c.packing.c_str(), how.c_str());
  } else if (c.packing == "bestfit" && start.packing_buffer > 0 && start.packing_buffer != c.packing_buffer) {
    std::fprintf(stderr, "nfn: resuming with --packing-buffer %d, its run's was %d: its buffered documents stay, and "
                 "the buffer refills to %d\n", c.packing_buffer, start.packing_buffer, c.packing_buffer);
  }
}

// A resumed run reads its data in its run's order and cuts rows as its run did, unless --seed,
// --packing or --packing-buffer names another.
void keep_resumed_data_order(const Start& start, TrainConfig* c) {
  if (start.from.empty()) return;
  if (!c->seed_given && start.has_seed) c->seed = start.seed;
  if (!c->packing_given) c->packing = start.packing;
  if (!c->packing_buffer_given && start.packing_buffer > 0) c->packing_buffer = start.packing_buffer;
}


std::string shard_list(const std::vector<data::TokenShard>& shards) {
  std::vector<std::string> items;
  for (const data::TokenShard& s : shards)
    items.push_back(s.path.substr(s.path.find_last_of('/') + 1) + ":" + std::to_string(s.num_tokens));
  std::sort(items.begin(), items.end());
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace nfn

namespace nfn {

namespace {
// "name_train_000001.bin:123,..." -> "train_000001.bin:123,...".
std::string without_prefixes(const std::string& list) {
  std::string out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    size_t split = std::string::npos;
    for (const char* tag : {"_train_", "_val_"})
      if (size_t at = item.rfind(tag); at != std::string::npos && (split == std::string::npos || at > split)) split = at;
    out += (out.empty() ? "" : ",") + (split == std::string::npos ? item : item.substr(split + 1));
    start = end + 1;
  }
  return out;
}
}  // namespace

bool same_shards(const std::string& a, const std::string& b) { return without_prefixes(a) == without_prefixes(b); }

}  // namespace nfn
