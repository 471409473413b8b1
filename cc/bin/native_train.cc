// nfn_native_train: runs the trainer of the model family that --model-family (or its other
// spelling --base-model) names, else the --graph-file manifest's, else the --init-from
// checkpoint's, else gpt; and lists the families with an honest status.
// The checkpoint queries (--inspect-checkpoint, --inspect-geometry: cc/train/checkpoint_query.h)
// go to the family's trainer the same way, gpt's by default: a checkpoint's format and which
// one a resume continues are the trainer's.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "cc/util/artifacts.h"
#include "cc/util/files.h"
#include "cc/util/json.h"

namespace {

struct Family {
  const char* name;
  const char* binary;  // "" when no trainer exists yet
  const char* status;  // ready, partial or missing
  const char* note;
};

constexpr Family kFamilies[] = {
    {"gpt", "nfn_gpt_native_train", "ready", "dense GPT-2 architecture"},
    {"gpt2", "nfn_gpt_native_train", "ready", "the dense GPT trainer"},
    {"gpt3", "nfn_gpt_native_train", "ready", "the dense GPT trainer; 2048 context by default"},
    {"nanochat", "nfn_nanochat_native_train", "ready", "nanochat's model with Muon; --depth sizes it"},
    {"llama", "nfn_llama_native_train", "ready", "llama architecture (RMSNorm, SwiGLU, rotary, GQA)"},
    {"nanogpt", "nfn_gpt_native_train", "ready",
     "nanoGPT checkpoints import into the dense GPT (nfn import --nanogpt)"},
    {"embedding", "", "missing", "no trainer yet: sentence-embedding models are planned"},
};

const Family* find_family(const std::string& name) {
  for (const auto& f : kFamilies)
    if (name == f.name) return &f;
  return nullptr;
}

// The family binary beside this one, or in the runfiles tree we run from.
std::string binary_path(const char* binary) {
  for (const std::string& dir : nfn::sibling_and_runfiles_dirs("cc/bin")) {
    std::string path = nfn::join_path(dir, binary);
    if (nfn::path_exists(path)) return path;
  }
  return "";
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: nfn_native_train [--model-family NAME] [trainer flags...]\n"
               "       nfn_native_train --list-models [--json]\n"
               "       nfn_native_train --inspect-checkpoint SPEC [--for-resume] --json\n"
               "       nfn_native_train --inspect-geometry --max-seq-len T ... --json\n\n"
               "Runs the native trainer of a model family (default: the --graph-file manifest's, else\n"
               "gpt); every flag goes to it (see nfn_gpt_native_train --help, nfn_nanochat_native_train\n"
               "--help, nfn_llama_native_train --help, and\n"
               "nfn_native_train --inspect-geometry --help for the checkpoint queries).\n");
}

// The value of `--NAME V` or `--NAME=V` at argv[i] for any of `names`; advances i past it.
bool flag_value(int argc, char** argv, int* i, std::initializer_list<const char*> names, std::string* spelled,
                std::string* value) {
  const std::string a = argv[*i];
  for (const char* name : names) {
    const std::string flag = std::string("--") + name;
    if (a == flag && *i + 1 < argc) {
      *spelled = flag;
      *value = argv[++*i];
      return true;
    }
    if (a.rfind(flag + "=", 0) == 0) {
      *spelled = flag;
      *value = a.substr(flag.size() + 1);
      return true;
    }
  }
  return false;
}

// A --graph-file manifest's model_family; "" where it names none or cannot be read (the
// family's trainer reports the file).
std::string graph_family(const std::string& path) {
  std::string text, error;
  nfn::Json j;
  if (path.empty() || !nfn::read_file(path, &text, &error) || !nfn::Json::parse(text, &j, &error)) return "";
  const nfn::Json* family = j.is_object() ? j.find("model_family") : nullptr;
  return family != nullptr && family->is_string() ? family->as_string() : "";
}

// The family of a --init-from checkpoint: a directory's manifest.json names it; a model file
// says it itself (llm.c's magic: gpt; a safetensors header: its __metadata__ model_family).
// "" where neither tells (the trainer then reports the checkpoint).
std::string init_family(const std::string& spec) {
  if (spec.empty()) return "";
  if (nfn::is_directory(spec)) return graph_family(nfn::join_path(spec, "manifest.json"));
  const std::string named = nfn::join_path(nfn::artifacts_dir(), spec);  // a name under the artifacts directory
  if (spec.find('/') == std::string::npos && !nfn::path_exists(spec) && nfn::is_directory(named))
    return graph_family(nfn::join_path(named, "manifest.json"));
  FILE* f = std::fopen(spec.c_str(), "rb");
  if (f == nullptr) return "";
  unsigned char head[8] = {0};
  std::string family;
  if (std::fread(head, 1, 8, f) == 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | head[i];
    if ((n & 0xffffffffu) == 20240326u) {
      family = "gpt";
    } else if (n > 0 && n < (100u << 20)) {
      std::string text(n, '\0');
      nfn::Json j;
      std::string error;
      if (std::fread(text.data(), 1, n, f) == n && nfn::Json::parse(text, &j, &error) && j.is_object()) {
        const nfn::Json* meta = j.find("__metadata__");
        const nfn::Json* name = meta != nullptr && meta->is_object() ? meta->find("model_family") : nullptr;
        if (name != nullptr && name->is_string()) family = name->as_string();
      }
    }
  }
  std::fclose(f);
  return family;
}

}  // namespace

int main(int argc, char** argv) {
  std::string base, graph, init;
  bool list = false, json = false, help = false, query = false;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], spelled, value;
    if (a == "--list-models") {
      list = true;
    } else if (flag_value(argc, argv, &i, {"model-family", "base-model"}, &spelled, &value)) {
      if (!base.empty() && value != base) {
        std::fprintf(stderr, "nfn_native_train: error: %s %s contradicts the family %s named before; give one\n",
                     spelled.c_str(), value.c_str(), base.c_str());
        return 2;
      }
      base = value;
    } else {
      if (flag_value(argc, argv, &i, {"graph-file", "graph"}, &spelled, &value)) {
        graph = value;
        rest.push_back(spelled + "=" + value);
        continue;
      }
      if (flag_value(argc, argv, &i, {"init-from"}, &spelled, &value)) {
        init = value;
        rest.push_back(spelled + "=" + value);
        continue;
      }
      help |= a == "--help";
      query |= a == "--inspect-geometry" || a == "--inspect-checkpoint" || a.rfind("--inspect-checkpoint=", 0) == 0;
      json |= a == "--json";
      rest.push_back(a);
    }
  }
  if (help && base.empty() && !query) return usage(stdout), 0;
  if (list) {
    nfn::Json models = nfn::Json::array();
    for (const auto& f : kFamilies) {
      nfn::Json m = nfn::Json::object();
      m.set("name", f.name);
      std::string path = *f.binary ? binary_path(f.binary) : "";
      bool ready = std::strcmp(f.status, "ready") == 0 && !path.empty();
      m.set("status", ready || std::strcmp(f.status, "ready") != 0 ? f.status : "missing");
      m.set("binary", *f.binary ? nfn::Json(f.binary) : nfn::Json());
      m.set("reason", ready ? nfn::Json() : nfn::Json(*f.binary && path.empty() ? "trainer binary not built" : f.note));
      if (ready) m.set("note", f.note);
      models.push(m);
    }
    if (json) {
      nfn::Json out = nfn::Json::object();
      out.set("models", models);
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      for (const auto& m : models.items())
        std::printf("%-10s %-8s %s\n", m.find("name")->as_string().c_str(), m.find("status")->as_string().c_str(),
                    m.find("reason")->is_null() ? m.find("note")->as_string().c_str()
                                                : m.find("reason")->as_string().c_str());
    }
    return 0;
  }
  // The family named, else the model's (a --graph-file manifest's, a --init-from checkpoint's),
  // else gpt: the same family the trainer resolves, which refuses a named one its manifest or
  // checkpoint contradicts.
  const bool named = !base.empty();
  if (!named) base = graph_family(graph);
  const bool from_init = !named && base.empty() && !(base = init_family(init)).empty();
  if (base.empty()) base = "gpt";
  const std::string where = named       ? "--model-family " + base
                            : from_init ? "--init-from " + init + ": model_family " + base
                                        : graph + ": model_family " + base;
  const Family* f = find_family(base);
  if (f == nullptr) {
    std::fprintf(stderr, "nfn_native_train: error: %s: unknown (see --list-models)\n", where.c_str());
    return 2;
  }
  if (!*f->binary) {
    std::fprintf(stderr, "nfn_native_train: error: %s: %s\n", where.c_str(), f->note);
    return 2;
  }
  std::string path = binary_path(f->binary);
  if (path.empty()) {
    std::fprintf(stderr, "nfn_native_train: error: %s not found beside nfn_native_train\n", f->binary);
    return 1;
  }
  // gpt, gpt2 and gpt3 are model families of one trainer; a named family is passed on.
  if (named) rest.insert(rest.begin(), "--model-family=" + base);
  std::vector<char*> args = {const_cast<char*>(path.c_str())};
  for (std::string& a : rest) args.push_back(a.data());
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "nfn_native_train: error: cannot run %s\n", path.c_str());
  return 1;
}
