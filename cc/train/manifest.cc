#include "cc/train/manifest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "cc/ckpt/checkpoint.h"
#include "cc/train/resolve_decoder.h"
#include "cc/util/files.h"

namespace nfn {

Json manifest_json(const TrainConfig& c, const std::string& weights_file, int step, size_t parameters,
                   const std::string& run_id, const std::string& shards) {
  Json m = Json::object();
  m.set("format", kManifestFormat);
  m.set("version", kManifestVersion);
  const bool decoder = decoder_family(c.model_family);
  m.set("family", decoder ? "decoder" : "gpt");
  m.set("model_family", c.model_family);
  m.set("template", c.template_name);
  m.set("geometry", decoder ? decoder_geometry_json(c.decoder) : geometry_json(c.model));
  if (c.lora.on()) m.set("lora", lora_json(c.lora));  // the parameters are the adapters
  m.set("parameters", static_cast<uint64_t>(parameters));
  m.set("tokenizer", c.tokenizer);
  m.set("eot_token", c.eot_token);
  Json data = Json::object();
  data.set("name", c.dataset_name);
  data.set("train_shards", shards);  // what was read, however it was named
  data.set("seq_len", c.seq_len);
  m.set("dataset", data);
  m.set("weights", weights_file);
  m.set("step", step);
  m.set("run_id", run_id);
  Json training = Json::object();
  training.set("train_batch_tokens", static_cast<int64_t>(c.train_batch_tokens));
  training.set("batch_size", c.batch_size);
  training.set("max_steps", c.max_steps);
  training.set("learning_rate", c.learning_rate);
  training.set("weight_decay", c.weight_decay);
  training.set("warmup_steps", c.warmup_steps);
  training.set("final_lr_fraction", c.final_lr_fraction);
  // The seed as --seed gave it (an int64; the run uses its bits as a uint64), written exactly:
  // `nfn train` passes it back as --seed when resuming, and read_marker compares it with
  // --seed to tell whether the data position applies.
  training.set("seed", static_cast<int64_t>(c.seed));
  // Only best-fit runs name their packing, so a contiguous run's marker is what it was before
  // packing could be chosen; a marker without it is contiguous.
  if (c.packing == "bestfit") {
    training.set("packing", c.packing);
    training.set("packing_buffer", c.packing_buffer);
  }
  // A warm start's checkpoint, and the steps its restored moments held (AdamW's bias
  // correction counts them, and a resume must go on counting them): only where there is one.
  if (!c.init_from.empty()) {
    training.set("init_from", c.init_from);
    training.set("init_optimizer", !c.init_state.empty());
  }
  if (c.moment_steps > 0) training.set("moment_steps", c.moment_steps);
  m.set("training", training);
  return m;
}

namespace {

bool get_int(const Json& obj, const char* key, const std::string& where, int* out, std::string* error) {
  const Json* v = obj.find(key);
  if (v == nullptr || !v->is_number()) {
    *error = where + ": missing number field " + key;
    return false;
  }
  const double x = v->as_number();
  if (x != static_cast<double>(static_cast<int64_t>(x)) || x < -2147483648.0 || x > 2147483647.0) {
    *error = where + ": field " + key + " is not a whole number in int range (" + v->dump() + ")";
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

std::string run_id_of(const Json& manifest) {
  const Json* id = manifest.is_object() ? manifest.find("run_id") : nullptr;
  return id != nullptr && id->is_string() ? id->as_string() : "";
}

}  // namespace

Json read_object(const std::string& path) {
  std::string text, ignored;
  Json m;
  if (!read_file(path, &text, &ignored) || !Json::parse(text, &m, &ignored) || !m.is_object()) return Json();
  return m;
}

std::string new_run_id() {
  std::random_device source;
  char id[17];
  std::snprintf(id, sizeof id, "%08x%08x", static_cast<unsigned>(source()), static_cast<unsigned>(source()));
  return id;
}

Marker read_marker(const std::string& dir, int step) {
  const Json m = read_object(join_path(dir, done_file_name(step)));
  // The field `key` of the object `section` of the marker, or null.
  auto field = [&](const char* section, const char* key) -> const Json* {
    const Json* s = m.is_object() ? m.find(section) : nullptr;
    return s != nullptr && s->is_object() ? s->find(key) : nullptr;
  };
  Marker out;
  out.manifest = m;
  out.run_id = run_id_of(m);
  if (const Json* shards = field("dataset", "train_shards"); shards != nullptr && shards->is_string())
    out.shards = shards->as_string();
  if (const Json* seed = field("training", "seed"); seed != nullptr && seed->is_integer()) {
    out.has_seed = true;
    out.seed = static_cast<uint64_t>(seed->as_integer());  // as the --seed flag takes it
  }
  if (const Json* t = m.is_object() ? m.find("training") : nullptr; t != nullptr && t->is_object()) out.training = *t;
  if (const Json* p = field("training", "packing"); p != nullptr && p->is_string()) out.packing = p->as_string();
  if (const Json* m = field("training", "moment_steps"); m != nullptr && m->is_integer() && m->as_integer() > 0 &&
                                                           m->as_integer() <= INT32_MAX)
    out.moment_steps = static_cast<int>(m->as_integer());
  if (const Json* b = field("training", "packing_buffer"); b != nullptr && b->is_integer() && b->as_integer() > 0 &&
                                                             b->as_integer() <= INT32_MAX)
    out.packing_buffer = static_cast<int>(b->as_integer());
  return out;
}

std::string schedule_differences(const Json& training, const TrainConfig& c) {
  if (!training.is_object()) return "";
  const struct {
    const char* key;
    double now;
    double absent;  // what a marker without the key ran with (NaN: unknown)
  } fields[] = {{"train_batch_tokens", static_cast<double>(c.train_batch_tokens), NAN},
                {"learning_rate", c.learning_rate, NAN},
                {"warmup_steps", static_cast<double>(c.warmup_steps), NAN},
                {"final_lr_fraction", c.final_lr_fraction, 0.0},
                {"weight_decay", c.weight_decay, NAN},
                {"max_steps", static_cast<double>(c.max_steps), NAN}};
  std::string out;
  for (const auto& f : fields) {
    const Json* v = training.find(f.key);
    const double then = v != nullptr && v->is_number() ? v->as_number() : f.absent;
    if (std::isnan(then) || std::fabs(then - f.now) <= 1e-12 * std::fabs(f.now)) continue;
    char line[160];
    std::snprintf(line, sizeof line, "%s%s %.10g -> %.10g", out.empty() ? "" : ", ", f.key, then, f.now);
    out += line;
  }
  return out;
}

int newest_step_of_run(const std::string& dir, const std::string& run_id, int max_step, bool need_state) {
  for (int step : complete_steps(dir, need_state)) {
    if (step > max_step) continue;
    const std::string id = read_marker(dir, step).run_id;
    if (id.empty() || id == run_id) return step;
  }
  return -1;
}

ResumeChoice choose_resume(const std::string& dir, bool need_state) {
  ResumeChoice r;
  r.newest_any = newest_complete_step(dir, need_state);
  const Json m = read_object(join_path(dir, "manifest.json"));
  const Json* step = m.is_object() ? m.find("step") : nullptr;
  r.run_id = run_id_of(m);
  // A step is a whole non-negative number; anything else is a manifest from before run ids.
  if (r.run_id.empty() || step == nullptr || !step->is_integer() || step->as_integer() < 0) {
    r.run_id.clear();
    r.step = r.newest_any;  // no manifest, or one from before run ids
    return r;
  }
  r.manifest_step = static_cast<int>(std::min<int64_t>(step->as_integer(), INT32_MAX));  // past any step
  r.step = newest_step_of_run(dir, r.run_id, r.manifest_step, need_state);
  return r;
}

bool read_manifest(const std::string& path, TrainConfig* c, std::string* error) {
  std::string text;
  if (!read_file(path, &text, error)) return false;
  Json m;
  std::string why;
  if (!Json::parse(text, &m, &why)) {
    *error = path + ": not valid JSON (" + why + ")";
    return false;
  }
  const Json* format = m.find("format");
  if (!m.is_object() || format == nullptr || !format->is_string() || format->as_string() != kManifestFormat) {
    *error = path + ": not an nfn manifest (field format must be \"" + kManifestFormat + "\")";
    return false;
  }
  const Json* version = m.find("version");
  if (version == nullptr || !version->is_number() || version->as_number() != kManifestVersion) {
    *error = path + ": unsupported manifest version (expected " + std::to_string(kManifestVersion) + ")";
    return false;
  }
  const Json* geometry = m.find("geometry");
  if (geometry == nullptr || !geometry->is_object()) {
    *error = path + ": missing object field geometry";
    return false;
  }
  const std::string where = path + ": geometry";
  GPTConfig g;
  if (!get_int(*geometry, "max_seq_len", where, &g.max_seq_len, error) ||
      !get_int(*geometry, "vocab_size", where, &g.vocab_size, error) ||
      !get_int(*geometry, "padded_vocab_size", where, &g.padded_vocab_size, error) ||
      !get_int(*geometry, "num_layers", where, &g.num_layers, error) ||
      !get_int(*geometry, "num_heads", where, &g.num_heads, error) ||
      !get_int(*geometry, "channels", where, &g.channels, error))
    return false;
  std::string bad = validate_config(g);
  if (!bad.empty()) {
    *error = where + ": " + bad;
    return false;
  }
  c->model = g;
  if (const Json* f = m.find("model_family"); f && f->is_string()) {
    if (!dense_gpt_family(f->as_string())) {
      *error = path + ": model_family " + f->as_string() + " is not one the dense GPT trainer takes (gpt, gpt2, gpt3)";
      return false;
    }
    c->model_family = f->as_string();
  }
  if (const Json* t = m.find("template"); t && t->is_string()) c->template_name = t->as_string();
  if (const Json* t = m.find("tokenizer"); t && t->is_string() && c->tokenizer.empty()) c->tokenizer = t->as_string();
  if (const Json* e = m.find("eot_token"); e && e->is_number() && c->eot_token < 0)
    c->eot_token = static_cast<int>(e->as_number());
  return true;
}

}  // namespace nfn
