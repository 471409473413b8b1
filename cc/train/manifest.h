// The manifest beside the weights: what the model is (family, template, geometry), what it
// was trained on (tokenizer, dataset name and sequence length, never the text) and which
// weights file holds it. --graph-file reads it back as the architecture's source of truth.
#pragma once

#include <string>

#include "cc/train/train_config.h"

namespace nfn {

constexpr const char* kManifestFormat = "nfn.manifest";
constexpr int kManifestVersion = 1;

Json manifest_json(const TrainConfig& c, const std::string& weights_file, int step, size_t parameters);
// Reads family, template and geometry (and tokenizer/dataset when present) into *c.
bool read_manifest(const std::string& path, TrainConfig* c, std::string* error);

}  // namespace nfn
