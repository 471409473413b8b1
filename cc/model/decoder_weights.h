// The decoder families' weights file: safetensors with the family's tensor names
// (decoder_layout) and three `__metadata__` strings: format "nfn-decoder", model_family
// ("nanochat" or "llama") and geometry (decoder_geometry_json), so a file says what model it
// holds and a reader needs nothing else.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cc/model/decoder_config.h"
#include "cc/model/lora.h"
#include "cc/util/json.h"

namespace nfn {

constexpr const char* kDecoderWeightsFormat = "nfn-decoder";
// A LoRA run's checkpoint: its adapters (lora_layout's names), with __metadata__ format
// "nfn-lora", model_family, geometry, lora (lora_json) and base (the base weights file's path).
constexpr const char* kLoraWeightsFormat = "nfn-lora";

Json decoder_geometry_json(const DecoderConfig& d);
// The geometry back from decoder_geometry_json's text (norm_eps, which it does not write,
// keeps its default); false with one line naming the field that is missing or wrong.
bool decoder_config_from_json(DecoderFamily family, const std::string& text, DecoderConfig* out,
                              std::string* error);
std::vector<std::pair<std::string, std::string>> decoder_weights_metadata(const DecoderConfig& c);
Json lora_json(const LoraSpec& spec);
bool lora_from_json(const std::string& text, LoraSpec* out, std::string* error);
std::vector<std::pair<std::string, std::string>> lora_weights_metadata(const DecoderConfig& c, const LoraSpec& spec,
                                                                       const std::string& base);

// Reads a whole weights file: its family and geometry from the metadata (validated), and every
// tensor, widened to f32, into `params` in decoder_layout's order; a LoRA checkpoint gives the
// model its adapters make with their base (lora_merged). Errors are "<path>: <what>".
bool read_decoder_weights(const std::string& path, DecoderConfig* config, std::vector<float>* params,
                          std::string* error);

}  // namespace nfn
