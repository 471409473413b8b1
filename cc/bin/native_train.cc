// nfn_native_train: dispatches --base-model NAME to the family's trainer binary, and lists
// the families with an honest status.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
    {"nanogpt", "", "missing", "no trainer yet: nanochat-style architecture (rotary, RMSNorm, ReLU^2) is planned"},
    {"llama", "", "missing", "no trainer yet: llama architecture (RMSNorm, SwiGLU, rotary, GQA) is planned"},
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
               "usage: nfn_native_train --base-model NAME [trainer flags...]\n"
               "       nfn_native_train --list-models [--json]\n\n"
               "Runs the native trainer of a model family; every other flag goes to it\n"
               "(see nfn_gpt_native_train --help).\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string base;
  bool list = false, json = false;
  std::vector<char*> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list-models") list = true;
    else if (a == "--help" && base.empty()) return usage(stdout), 0;
    else if (a == "--base-model" && i + 1 < argc) base = argv[++i];
    else if (a.rfind("--base-model=", 0) == 0) base = a.substr(13);
    else {
      if (a == "--json") json = true;
      rest.push_back(argv[i]);
    }
  }
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
  if (base.empty()) {
    usage(stderr);
    std::fprintf(stderr, "nfn_native_train: error: --base-model is required\n");
    return 2;
  }
  const Family* f = find_family(base);
  if (f == nullptr) {
    std::fprintf(stderr, "nfn_native_train: error: unknown --base-model %s (see --list-models)\n", base.c_str());
    return 2;
  }
  if (!*f->binary) {
    std::fprintf(stderr, "nfn_native_train: error: --base-model %s: %s\n", base.c_str(), f->note);
    return 2;
  }
  std::string path = binary_path(f->binary);
  if (path.empty()) {
    std::fprintf(stderr, "nfn_native_train: error: %s not found beside nfn_native_train\n", f->binary);
    return 1;
  }
  std::vector<char*> args = {const_cast<char*>(path.c_str())};
  // gpt, gpt2 and gpt3 are model families of the one trainer; pass the choice on.
  std::string family_flag = "--model-family=" + base;
  bool has_family = false;
  for (char* a : rest) has_family |= std::strncmp(a, "--model-family", 14) == 0;
  if (!has_family) args.push_back(const_cast<char*>(family_flag.c_str()));
  args.insert(args.end(), rest.begin(), rest.end());
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "nfn_native_train: error: cannot run %s\n", path.c_str());
  return 1;
}
