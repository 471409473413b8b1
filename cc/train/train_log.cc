#include "cc/train/train_log.h"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "cc/util/files.h"
#include "cc/util/json.h"

namespace nfn {

namespace {

// The lines of an earlier log whose step is at most `last`: whole JSON objects only.
std::string kept_lines(const std::string& text, int last) {
  std::istringstream in(text);
  std::string line, kept, ignored;
  while (std::getline(in, line)) {
    Json j;
    if (!Json::parse(line, &j, &ignored) || !j.is_object()) continue;
    const Json* step = j.find("step");
    if (step != nullptr && step->is_number() && step->as_number() <= last) kept += line + "\n";
  }
  return kept;
}

}  // namespace

TrainLog::~TrainLog() {
  if (file_ != nullptr) std::fclose(file_);
}

bool TrainLog::open(const std::string& dir, int resumed_step, std::string* error) {
  if (!make_dirs(dir, error)) return false;
  path_ = join_path(dir, kFileName);
  if (resumed_step > 0 && path_exists(path_)) {
    std::string text;
    if (!read_file(path_, &text, error) || !write_file_atomic(path_, kept_lines(text, resumed_step), error))
      return false;
  }
  append_ = resumed_step > 0;
  return true;
}

bool TrainLog::write_line(const Json& line, std::string* error) {
  // Opened at the first line: a fresh run that fails before its first step leaves an
  // earlier run's log as it was.
  if (file_ == nullptr && (file_ = std::fopen(path_.c_str(), append_ ? "a" : "w")) == nullptr) {
    *error = path_ + ": " + std::strerror(errno);
    return false;
  }
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    *error = path_ + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool TrainLog::train(int step, double loss, double lr, double grad_norm, double seconds, double tokens_per_s,
                     int64_t targets, std::string* error) {
  Json j = Json::object();
  j.set("step", step);
  j.set("train_loss", loss);
  j.set("lr", lr);
  j.set("grad_norm", grad_norm);
  j.set("step_ms", 1e3 * seconds);
  j.set("tokens_per_s", tokens_per_s);
  if (targets >= 0) j.set("targets", targets);
  return write_line(j, error);
}

bool TrainLog::validation(int step, double loss, std::string* error) {
  Json j = Json::object();
  j.set("step", step);
  j.set("val_loss", loss);
  return write_line(j, error);
}

}  // namespace nfn
