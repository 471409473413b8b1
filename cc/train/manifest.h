// The manifest beside the weights: what the model is (family, template, geometry), what it
// was trained on (tokenizer, dataset name and sequence length, never the text) and which
// weights file holds it. --graph-file reads it back as the architecture's source of truth.
#pragma once

#include <string>

#include "cc/train/train_config.h"

namespace nfn {

constexpr const char* kManifestFormat = "nfn.manifest";
constexpr int kManifestVersion = 1;

// run_id: the run that wrote the weights (its checkpoints' DONE markers hold it too).
Json manifest_json(const TrainConfig& c, const std::string& weights_file, int step, size_t parameters,
                   const std::string& run_id);
// The run_id of `dir`'s manifest.json: the run that last wrote a checkpoint there, which
// `--resume auto` continues ("" when there is no manifest, it cannot be read or predates run ids).
std::string manifest_run_id(const std::string& dir);
// Reads family, template and geometry (and tokenizer/dataset when present) into *c.
bool read_manifest(const std::string& path, TrainConfig* c, std::string* error);

}  // namespace nfn
