#include "cc/model/decoder_weights.h"

#include "cc/ckpt/safetensors.h"
#include "cc/util/quant.h"

namespace nfn {

Json decoder_geometry_json(const DecoderConfig& d) {
  Json j = Json::object();
  j.set("max_seq_len", d.max_seq_len);
  j.set("vocab_size", d.vocab_size);
  j.set("padded_vocab_size", d.padded_vocab_size);
  j.set("num_layers", d.num_layers);
  j.set("num_heads", d.num_heads);
  j.set("num_kv_heads", d.num_kv_heads);
  j.set("head_dim", d.head_dim);
  j.set("channels", d.channels);
  j.set("mlp_hidden", d.hidden);
  j.set("rope_theta", static_cast<double>(d.rope_theta));
  j.set("window_pattern", d.window_pattern);
  j.set("tied_head", d.tied_head);
  return j;
}

bool decoder_config_from_json(DecoderFamily family, const std::string& text, DecoderConfig* out,
                              std::string* error) {
  Json j;
  std::string why;
  if (!Json::parse(text, &j, &why) || !j.is_object()) {
    *error = "geometry is not a JSON object" + (why.empty() ? std::string() : " (" + why + ")");
    return false;
  }
  DecoderConfig c;
  c.family = family;
  const std::pair<const char*, int*> ints[] = {
      {"max_seq_len", &c.max_seq_len}, {"vocab_size", &c.vocab_size},     {"padded_vocab_size", &c.padded_vocab_size},
      {"num_layers", &c.num_layers},   {"num_heads", &c.num_heads},       {"num_kv_heads", &c.num_kv_heads},
      {"head_dim", &c.head_dim},       {"channels", &c.channels},         {"mlp_hidden", &c.hidden},
  };
  for (const auto& [key, field] : ints) {
    const Json* v = j.find(key);
    if (v == nullptr || !v->is_integer() || v->as_integer() < 1 || v->as_integer() > (1 << 30)) {
      *error = std::string("geometry.") + key + " must be a positive integer";
      return false;
    }
    *field = static_cast<int>(v->as_integer());
  }
  const Json* theta = j.find("rope_theta");
  const Json* pattern = j.find("window_pattern");
  const Json* tied = j.find("tied_head");
  const Json* eps = j.find("norm_eps");
  if (theta == nullptr || !theta->is_number()) {
    *error = "geometry.rope_theta must be a number";
    return false;
  }
  if (pattern == nullptr || !pattern->is_string()) {
    *error = "geometry.window_pattern must be a string";
    return false;
  }
  if (tied == nullptr || !tied->is_bool()) {
    *error = "geometry.tied_head must be true or false";
    return false;
  }
  if (eps != nullptr && !eps->is_number()) {
    *error = "geometry.norm_eps must be a number";
    return false;
  }
  c.rope_theta = static_cast<float>(theta->as_number());
  c.window_pattern = pattern->as_string();
  c.tied_head = tied->as_bool();
  if (eps != nullptr) c.norm_eps = static_cast<float>(eps->as_number());
  const std::string bad = validate_decoder(c);
  if (!bad.empty()) {
    *error = "geometry: " + bad;
    return false;
  }
  *out = c;
  return true;
}

std::vector<std::pair<std::string, std::string>> decoder_weights_metadata(const DecoderConfig& c) {
  return {{"format", kDecoderWeightsFormat},
          {"model_family", decoder_family_name(c.family)},
          {"geometry", decoder_geometry_json(c).dump()}};
}

Json lora_json(const LoraSpec& s) {
  Json j = Json::object();
  j.set("rank", s.rank);
  j.set("alpha", static_cast<double>(s.alpha));
  j.set("targets", s.attention && s.mlp ? "all" : s.attention ? "attn" : "mlp");
  j.set("quantize_base", s.quant < 0 ? Json() : Json(quant::type_name(s.quant)));
  return j;
}

bool lora_from_json(const std::string& text, LoraSpec* out, std::string* error) {
  Json j;
  std::string why;
  if (!Json::parse(text, &j, &why) || !j.is_object()) {
    *error = "lora is not a JSON object";
    return false;
  }
  const Json *rank = j.find("rank"), *alpha = j.find("alpha"), *targets = j.find("targets"),
             *quant_base = j.find("quantize_base");
  LoraSpec s;
  if (rank == nullptr || !rank->is_integer() || rank->as_integer() < 1 || rank->as_integer() > (1 << 20) ||
      alpha == nullptr || !alpha->is_number() || targets == nullptr || !targets->is_string() ||
      (targets->as_string() != "all" && targets->as_string() != "attn" && targets->as_string() != "mlp") ||
      (quant_base != nullptr && !quant_base->is_null() &&
       (!quant_base->is_string() || quant::parse_type(quant_base->as_string()) < 0))) {
    *error = "lora needs rank (a positive integer), alpha, targets (all, attn or mlp) and quantize_base";
    return false;
  }
  s.rank = static_cast<int>(rank->as_integer());
  s.alpha = static_cast<float>(alpha->as_number());
  s.attention = targets->as_string() != "mlp";
  s.mlp = targets->as_string() != "attn";
  s.quant = quant_base == nullptr || quant_base->is_null() ? -1 : quant::parse_type(quant_base->as_string());
  why = validate_lora(s);
  if (!why.empty()) {
    *error = "lora: " + why;
    return false;
  }
  *out = s;
  return true;
}

std::vector<std::pair<std::string, std::string>> lora_weights_metadata(const DecoderConfig& c, const LoraSpec& spec,
                                                                       const std::string& base) {
  return {{"format", kLoraWeightsFormat},
          {"model_family", decoder_family_name(c.family)},
          {"geometry", decoder_geometry_json(c).dump()},
          {"lora", lora_json(spec).dump()},
          {"base", base}};
}

namespace {

// A LoRA checkpoint as the whole model: its base read, its adapters merged in.
bool read_lora_merged(const std::string& path, const SafetensorsInfo& info, DecoderConfig* config,
                      std::vector<float>* params, std::string* error) {
  auto meta = [&](const char* key) {
    auto it = info.metadata.find(key);
    return it == info.metadata.end() ? std::string() : it->second;
  };
  LoraSpec spec;
  std::string why;
  if (!lora_from_json(meta("lora"), &spec, &why)) {
    *error = path + ": __metadata__ " + why;
    return false;
  }
  const std::string base = meta("base");
  DecoderConfig c;
  std::vector<float> base_params;
  if (base.empty() || !read_decoder_weights(base, &c, &base_params, &why)) {
    *error = path + ": its base " + (base.empty() ? std::string("is not named") : "does not load: " + why);
    return false;
  }
  if (decoder_geometry_json(c).dump() != meta("geometry") || decoder_family_name(c.family) != meta("model_family")) {
    *error = path + ": its base " + base + " is not the model it was trained over (geometry or family differ)";
    return false;
  }
  std::vector<float> adapters(lora_num_parameters(c, spec));
  const FloatSink into = into_host(&adapters);
  for (const DecoderTensor& t : lora_layout(c, spec)) {
    const std::vector<size_t> shape = t.rows == 1 ? std::vector<size_t>{t.cols} : std::vector<size_t>{t.rows, t.cols};
    if (!read_safetensors_tensor(path, info, t.name, shape, t.offset, into, error)) return false;
  }
  *config = c;
  *params = lora_merged(c, spec, std::move(base_params), adapters);
  return true;
}

}  // namespace

bool read_decoder_weights(const std::string& path, DecoderConfig* config, std::vector<float>* params,
                          std::string* error) {
  SafetensorsInfo info;
  if (!read_safetensors_header(path, &info, error)) return false;
  auto meta = [&](const char* key) {
    auto it = info.metadata.find(key);
    return it == info.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") == kLoraWeightsFormat) return read_lora_merged(path, info, config, params, error);
  if (meta("format") != kDecoderWeightsFormat) {
    *error = path + ": not an nfn decoder weights file (its __metadata__ format is \"" + meta("format") +
             "\", not \"" + kDecoderWeightsFormat + "\")";
    return false;
  }
  const std::string family = meta("model_family");
  if (family != "nanochat" && family != "llama") {
    *error = path + ": __metadata__ model_family \"" + family + "\" is not nanochat or llama";
    return false;
  }
  DecoderConfig c;
  std::string why;
  if (!decoder_config_from_json(family == "nanochat" ? DecoderFamily::kNanochat : DecoderFamily::kLlama,
                                meta("geometry"), &c, &why)) {
    *error = path + ": __metadata__ " + why;
    return false;
  }
  std::vector<float> host(decoder_num_parameters(c));
  const FloatSink into = into_host(&host);
  for (const DecoderTensor& t : decoder_layout(c)) {
    const std::vector<size_t> shape = t.rows == 1 ? std::vector<size_t>{t.cols} : std::vector<size_t>{t.rows, t.cols};
    if (!read_safetensors_tensor(path, info, t.name, shape, t.offset, into, error)) return false;
  }
  *config = c;
  *params = std::move(host);
  return true;
}

}  // namespace nfn
