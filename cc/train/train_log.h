// The run's log: <output-dir>/log.jsonl, one JSON object a line, written as each step's loss
// is read, so a run stopped by anything (a kill, a lost machine) keeps its history up to
// there, as llm.c's main.log does. report.json has the same numbers, but only at the end.
//   {"step":12,"train_loss":4.3121,"lr":0.0006,"grad_norm":0.823,"step_ms":31.2,"tokens_per_s":524800}
//   {"step":250,"val_loss":4.0537}
// Masked rows' step lines add "targets": the learned targets the step's loss is the mean over.
// A fresh run starts it anew at its first line. A resumed one keeps the lines up to the step it resumes from
// (the run it continues may have gone further before it stopped, past its last checkpoint;
// so may a half-written last line, which is dropped) and appends after them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nfn {

class Json;

class TrainLog {
 public:
  TrainLog() = default;
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  bool open(const std::string& dir, int resumed_step, std::string* error);
  // targets >= 0 (masked rows): the learned targets the step's loss counts, as "targets".
  bool train(int step, double loss, double lr, double grad_norm, double seconds, double tokens_per_s,
             int64_t targets, std::string* error);
  bool validation(int step, double loss, std::string* error);

  static constexpr const char* kFileName = "log.jsonl";

 private:
  bool write_line(const Json& line, std::string* error);

  std::FILE* file_ = nullptr;
  std::string path_;
  bool append_ = false;
};

}  // namespace nfn
