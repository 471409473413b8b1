// Which checkpoint a name given on the command line means: `nfn infer --checkpoint SPEC` and
// `nfn eval --checkpoint SPEC` ask this (through `nfn_native_train --inspect-checkpoint`), so
// the rule lives once, beside the trainer's own resume choice (choose_resume), which it
// applies to directories.
#pragma once

#include <string>

namespace nfn {

struct FoundCheckpoint {
  std::string kind;      // "llmc": an llm.c model file; "hf": a Hugging Face GPT-2 directory
  std::string path;      // the model file, or the Hugging Face directory (absolute)
  int step = -1;         // from a model_%08d.bin name; -1 where the name has none
  std::string manifest;  // the manifest describing it ("" where none): manifest_of
};

// SPEC, checked in this order:
// - a file: an llm.c model file. A model_%08d.bin beside a manifest (a trainer's directory)
//   must have its DONE marker; a file from another tool needs none.
// - a directory: a Hugging Face GPT-2 one (config.json + model.safetensors), else the step
//   choose_resume picks there: with for_resume, among the steps whose state file is there too
//   (the trainer's complete_steps); without, among those whose model and marker are
//   (sampling needs the model alone).
// - a name without '/': that directory under artifacts_dir ("" looks nowhere).
// "~" and "~user" at its start are the home directory, as a shell expands them.
// false + one line naming the file or directory and what is missing.
bool find_checkpoint(const std::string& spec, bool for_resume, const std::string& artifacts_dir,
                     FoundCheckpoint* out, std::string* error);

// The step of a "model_%08d.bin" name (exactly 8 digits, as the trainer names them); -1 for
// any other name.
int model_step(const std::string& name);

// The manifest describing a trainer's model_%08d.bin: its DONE marker, where the trainer
// writes the checkpoint's own manifest, else (an empty marker, from before run ids) the
// directory's manifest.json; "" where neither is there.
std::string manifest_of(const std::string& model_path);

// `path` made absolute against the working directory, with ".", ".." and repeated slashes
// taken out, as Python's os.path.abspath makes it.
std::string absolute_path(const std::string& path);

}  // namespace nfn
