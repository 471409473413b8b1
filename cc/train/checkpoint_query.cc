#include "cc/train/checkpoint_query.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cc/ckpt/checkpoint.h"  // and the GPT geometry and layout the format holds
#include "cc/train/family.h"
#include "cc/train/find_checkpoint.h"
#include "cc/train/manifest.h"
#include "cc/train/train_config.h"
#include "cc/util/flags.h"
#include "cc/util/json.h"

namespace nfn {

namespace {

constexpr size_t kHeaderBytes = 1024;  // 256 int32, before the parameters

FlagSpec query_flag(const char* name, FlagType type, const char* help) {
  FlagSpec s{name, "query", type, help};
  if (type == FlagType::kInt) {  // any C int: validate_config judges the geometry
    s.min = -kIntFlagMax - 1;
    s.max = kIntFlagMax;
  }
  return s;
}

std::vector<FlagSpec> query_flags() {
  const FlagType text = FlagType::kText, toggle = FlagType::kToggle, integer = FlagType::kInt;
  return {
      query_flag("inspect-checkpoint", text,
                 "SPEC: a model file, a checkpoint directory or an artifact name; prints which checkpoint it names, "
                 "its manifest, header and tensor layout"),
      query_flag("for-resume", toggle,
                 "with --inspect-checkpoint: the checkpoint a --resume of SPEC continues (a directory's steps count "
                 "only with their state file, which a resume needs beside the model)"),
      query_flag("artifacts-dir", text,
                 "with --inspect-checkpoint: where an artifact name is looked up (nfn passes its own)"),
      query_flag("resolve-only", toggle,
                 "with --inspect-checkpoint: which checkpoint and its manifest alone, reading no model file"),
      query_flag("inspect-geometry", toggle,
                 "prints the padded vocabulary, parameter count and tensor layout of the geometry given by the "
                 "flags below"),
      query_flag("max-seq-len", integer, "with --inspect-geometry: the context"),
      query_flag("vocab-size", integer, "with --inspect-geometry: the vocabulary"),
      query_flag("num-layers", integer, "with --inspect-geometry: the layers"),
      query_flag("num-heads", integer, "with --inspect-geometry: the attention heads"),
      query_flag("channels", integer, "with --inspect-geometry: the model width"),
      query_flag("padded-vocab-size", integer,
                 "with --inspect-geometry: wte's rows (default: the vocabulary rounded up to a multiple of 128, as "
                 "the trainer pads it)"),
      query_flag("model-family", text, "the family whose checkpoints these are (gpt, gpt2 and gpt3 share one format)"),
      query_flag("json", toggle, "print JSON (the only output these queries have)"),
      query_flag("help", toggle, "show this help"),
  };
}

// The tensors of g in parameter-block order. With a file's version: each one's dtype, byte
// offset in the file and bytes; without (0): its elements and its first element's place.
Json tensors_json(const GPTConfig& g, int version) {
  const size_t esize = version == kModelVersionBF16 ? 2 : 4;
  Json tensors = Json::array();
  for (const ParamTensor& t : param_layout(g)) {
    Json shape = Json::array();
    for (size_t d : t.shape) shape.push(static_cast<uint64_t>(d));
    Json j = Json::object();
    j.set("name", t.name);
    j.set("shape", shape);
    if (version == 0) {
      j.set("elements", static_cast<uint64_t>(t.count));
      j.set("element_offset", static_cast<uint64_t>(t.offset));
    } else {
      j.set("dtype", version == kModelVersionBF16 ? "bf16" : "f32");
      j.set("offset", static_cast<uint64_t>(kHeaderBytes + t.offset * esize));
      j.set("bytes", static_cast<uint64_t>(t.count * esize));
    }
    tensors.push(j);
  }
  return tensors;
}

// The geometry in the header's order.
void set_geometry(const GPTConfig& g, Json* j) {
  j->set("max_seq_len", g.max_seq_len);
  j->set("vocab_size", g.vocab_size);
  j->set("num_layers", g.num_layers);
  j->set("num_heads", g.num_heads);
  j->set("channels", g.channels);
  j->set("padded_vocab_size", g.padded_vocab_size);
}

bool checkpoint_answer(const Flags& f, Json* out, std::string* error) {
  FoundCheckpoint found;
  if (!find_checkpoint(f.get("inspect-checkpoint"), f.has("for-resume"), f.get("artifacts-dir"), &found, error))
    return false;
  *out = Json::object();
  out->set("kind", found.kind);
  out->set("path", found.path);
  out->set("step", found.step >= 0 ? Json(found.step) : Json());
  out->set("manifest_file", found.manifest.empty() ? Json() : Json(found.manifest));
  out->set("manifest", found.manifest.empty() ? Json() : read_object(found.manifest));
  if (found.kind != "llmc" || f.has("resolve-only")) return true;
  // A decoder family's model file is safetensors (docs/decoder.md) that names its family: its
  // kind says so, and its __metadata__ has its geometry.
  const std::string family = weights_family(found.path);
  if (decoder_family(family)) {
    out->set("kind", "decoder");
    out->set("model_family", family);
    return true;
  }
  GPTConfig g;
  int version = 0;
  if (!read_model_header(found.path, &g, &version, error)) return false;
  Json header = Json::object();
  header.set("magic", kModelMagic);
  header.set("version", version);
  header.set("dtype", version == kModelVersionBF16 ? "bf16" : "f32");
  set_geometry(g, &header);
  header.set("parameters", static_cast<uint64_t>(num_parameters(g)));
  const size_t esize = version == kModelVersionBF16 ? 2 : 4;
  // The size read_model_header checked the file against.
  header.set("file_bytes", static_cast<uint64_t>(kHeaderBytes + num_parameters(g) * esize));
  out->set("header", header);
  out->set("tensors", tensors_json(g, version));
  return true;
}

bool geometry_field(const Flags& f, const char* name, int* out, std::string* error) {
  if (!f.has(name)) {
    *error = std::string("--inspect-geometry needs --") + name;
    return false;
  }
  *out = static_cast<int>(f.get_int(name));  // parse checked it is an int
  return true;
}

bool geometry_answer(const Flags& f, Json* out, std::string* error) {
  GPTConfig g;
  if (!geometry_field(f, "max-seq-len", &g.max_seq_len, error) ||
      !geometry_field(f, "vocab-size", &g.vocab_size, error) ||
      !geometry_field(f, "num-layers", &g.num_layers, error) ||
      !geometry_field(f, "num-heads", &g.num_heads, error) || !geometry_field(f, "channels", &g.channels, error))
    return false;
  g.padded_vocab_size = pad_vocab(g.vocab_size);
  if (f.has("padded-vocab-size") && !geometry_field(f, "padded-vocab-size", &g.padded_vocab_size, error)) return false;
  const std::string bad = validate_config(g);
  if (!bad.empty()) {
    *error = "geometry: " + bad;
    return false;
  }
  Json geometry = Json::object();
  set_geometry(g, &geometry);
  *out = Json::object();
  out->set("geometry", geometry);
  out->set("parameters", static_cast<uint64_t>(num_parameters(g)));
  out->set("tensors", tensors_json(g, 0));
  return true;
}

}  // namespace

bool is_checkpoint_query(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--inspect-checkpoint") == 0 || std::strncmp(a, "--inspect-checkpoint=", 21) == 0 ||
        std::strcmp(a, "--inspect-geometry") == 0)
      return true;
  }
  return false;
}

int run_checkpoint_query(const char* program, int argc, char** argv) {
  Flags flags(program, "Answers questions about checkpoints and geometries, as JSON (cc/train/checkpoint_query.h).",
              query_flags());
  std::string error;
  int code = 2;
  if (flags.parse(argc, argv, &error) && flags.has("help")) {
    std::printf("%s", flags.help().c_str());
    return 0;
  }
  if (error.empty() && flags.has("inspect-checkpoint") && flags.has("inspect-geometry"))
    error = "--inspect-checkpoint and --inspect-geometry are two questions: ask one";
  Json out;
  if (error.empty()) {
    code = 1;
    const bool ok = flags.has("inspect-geometry") ? geometry_answer(flags, &out, &error)
                                                 : checkpoint_answer(flags, &out, &error);
    if (ok) {
      std::printf("%s\n", out.dump(1).c_str());
      return 0;
    }
  }
  std::fprintf(stderr, "%s: error: %s\n", program, error.c_str());
  return code;
}

}  // namespace nfn
