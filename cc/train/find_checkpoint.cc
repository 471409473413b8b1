#include "cc/train/find_checkpoint.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/train/manifest.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

int model_step(const std::string& name) {
  const std::string prefix = "model_", suffix = ".bin";
  if (name.size() != prefix.size() + 8 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(prefix.size() + 8, suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), 8);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::atoi(digits.c_str());
}

namespace {

std::string expand_user(const std::string& spec) {
  if (spec.empty() || spec[0] != '~') return spec;
  const size_t slash = spec.find('/');
  const std::string user = spec.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  std::string home;
  if (user.empty() && std::getenv("HOME") != nullptr) {
    home = std::getenv("HOME");
  } else {
    const passwd* pw = user.empty() ? ::getpwuid(::getuid()) : ::getpwnam(user.c_str());
    if (pw == nullptr) return spec;  // no such user: the name as it is
    home = pw->pw_dir;
  }
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  return home + (slash == std::string::npos ? "" : spec.substr(slash));
}

bool from_file(const std::string& path, FoundCheckpoint* out, std::string* error) {
  out->kind = "llmc";
  out->path = absolute_path(path);
  out->step = model_step(base_name(path));
  if (out->step < 0) return true;  // a model file from another tool
  out->manifest = manifest_of(path);
  // Only a trainer's directory (it has a manifest) promises DONE markers.
  if (!out->manifest.empty() && !path_exists(join_path(dir_name(path), done_file_name(out->step)))) {
    *error = path + ": incomplete checkpoint: no " + done_file_name(out->step) + " marker beside it";
    return false;
  }
  return true;
}

bool from_directory(const std::string& dir, bool for_resume, FoundCheckpoint* out, std::string* error) {
  const std::vector<std::string> names = list_dir(dir);
  auto has = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (has("config.json") && has("model.safetensors")) {
    out->kind = "hf";
    out->path = absolute_path(dir);
    return true;
  }
  int newest = -1;  // the newest model file, complete or not
  for (const std::string& name : names) newest = std::max(newest, model_step(name));
  if (newest < 0) {
    *error = dir + ": no checkpoint here (no model_%08d.bin, and not a Hugging Face directory with config.json + "
                   "model.safetensors)";
    return false;
  }
  const ResumeChoice r = choose_resume(dir, for_resume);
  if (r.step >= 0) {
    out->kind = "llmc";
    out->path = join_path(absolute_path(dir), model_file_name(r.step));
    out->step = r.step;
    out->manifest = manifest_of(out->path);
    return true;
  }
  if (r.newest_any >= 0) {
    *error = dir + ": the run that last wrote manifest.json (run_id " + r.run_id + ", step " +
             std::to_string(r.manifest_step) + ") left no complete checkpoint, and " + model_file_name(r.newest_any) +
             " is another run's: name that file";
    return false;
  }
  const bool marked = has(done_file_name(newest));
  *error = dir + ": incomplete checkpoint: " + model_file_name(newest) + " has no " +
           (marked ? state_file_name(newest) + " (a resume needs the optimizer's state)"
                   : done_file_name(newest) + " marker (the run stopped before it finished writing)");
  return false;
}

}  // namespace

std::string absolute_path(const std::string& path) {
  std::string full = path;
  if (full.empty() || full[0] != '/') {
    char cwd[4096];
    full = join_path(::getcwd(cwd, sizeof cwd) != nullptr ? cwd : "/", full);
  }
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= full.size()) {
    const size_t slash = std::min(full.find('/', at), full.size());
    const std::string part = full.substr(at, slash - at);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    at = slash + 1;
  }
  std::string out;
  for (const std::string& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

std::string manifest_of(const std::string& model_path) {
  const std::string dir = dir_name(model_path);
  const int step = model_step(base_name(model_path));
  if (step >= 0) {
    const std::string marker = join_path(dir, done_file_name(step));
    if (read_object(marker).is_object()) return absolute_path(marker);
  }
  const std::string manifest = join_path(dir, "manifest.json");
  return is_regular_file(manifest) ? absolute_path(manifest) : "";
}

bool find_checkpoint(const std::string& spec, bool for_resume, const std::string& artifacts_dir,
                     FoundCheckpoint* out, std::string* error) {
  *out = FoundCheckpoint();
  const std::string path = expand_user(spec);
  if (!path.empty() && is_regular_file(path)) return from_file(path, out, error);
  if (!path.empty() && is_directory(path)) return from_directory(path, for_resume, out, error);
  if (!artifacts_dir.empty() && !spec.empty() && spec.find('/') == std::string::npos &&
      is_directory(join_path(artifacts_dir, spec)))
    return from_directory(join_path(artifacts_dir, spec), for_resume, out, error);
  *error = "checkpoint " + spec + (artifacts_dir.empty() ? ": not a file or a directory"
                                                          : ": not a file, a directory, or an artifact name under " +
                                                                artifacts_dir);
  return false;
}

}  // namespace nfn
