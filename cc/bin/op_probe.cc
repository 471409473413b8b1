// nfn_op_probe: what the trainers' choice of op library finds here, as JSON on stdout, decided
// by the code the trainers run (cc/ops/backend.h), so `nfn kernels doctor` shows their answer
// rather than a copy of their rules.
#include <cstdio>
#include <cstring>
#include <string>

#include "cc/ops/backend.h"
#include "cc/util/json.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: nfn_op_probe\n\n"
               "Prints, as JSON, what the native trainers find here when they choose an op library\n"
               "(the same code decides): op_libraries.cpu and .cuda, where each backend's library is\n"
               "and whether it opens (loads, is this build's op ABI version, makes a context on\n"
               "device 0), with its device or the reason it does not; auto_backend, the library\n"
               "--backend auto loads and why; thunderkittens, whether the CUDA library's\n"
               "attention=thunderkittens runs here; bf16_matmul, whether the CPU library takes\n"
               "matmul=bf16, whether the CPU has bf16 units, and so whether bf16 GEMMs are the CPU\n"
               "trainer's default. Libraries are looked for as the trainers look: $NFN_TILE_OPS_DIR,\n"
               "beside this binary, then in its Bazel runfiles.\n");
}

// The reasons auto gives start "auto: " in a trainer's report; here the key says it.
std::string without_auto(const std::string& why) { return why.rfind("auto: ", 0) == 0 ? why.substr(6) : why; }

// The library `backend` (cpu or cuda) names, opened as a trainer opens it: {"path", "opens",
// "backend", "device"}, or {"path", "opens": false, "reason"}. *b keeps it open.
nfn::Json library_json(const std::string& backend, nfn::Backend* b) {
  nfn::Json out = nfn::Json::object();
  const std::string path = nfn::find_op_library(backend);
  out.set("path", path.empty() ? nfn::Json() : nfn::Json(path));
  std::string error;
  const bool opens = nfn::open_backend(backend, "", b, &error);
  out.set("opens", opens);
  if (opens) {
    out.set("backend", b->name);
    const char* device = b->lib.ops.ctx_query(b->ctx, "device");
    out.set("device", device != nullptr ? nfn::Json(device) : nfn::Json());
  } else {
    out.set("reason", error);
  }
  return out;
}

// {"would_load": "cuda", "cpu" or null, "reason"}: --backend auto's choice and why.
nfn::Json auto_json(nfn::Backend* b) {
  nfn::Json out = nfn::Json::object();
  std::string error;
  const bool opens = nfn::open_backend("auto", "", b, &error);
  out.set("would_load", opens ? nfn::Json(b->name) : nfn::Json());
  out.set("reason", without_auto(opens ? b->auto_note : error));
  return out;
}

// {"available": true, false or null (not known: no CUDA library loads), "reason"}, asked of
// the CUDA library without a context, so a library built without ThunderKittens says so on a
// machine without a GPU too.
nfn::Json thunderkittens_json() {
  nfn::Json out = nfn::Json::object();
  const std::string path = nfn::find_op_library("cuda");
  nfn::OpLibrary lib;
  std::string error;
  const char* answer = nullptr;
  if (path.empty())
    error = std::string("no ") + nfn::kCudaOpsLib + " found";
  else if (nfn::load_op_library(path, &lib, &error) && (answer = lib.ops.ctx_query(nullptr, "thunderkittens")) == nullptr)
    error = path + ": does not answer ctx_query thunderkittens";
  const bool available = answer != nullptr && std::strcmp(answer, "available") == 0;
  out.set("available", answer != nullptr ? nfn::Json(available) : nfn::Json());
  out.set("reason", answer == nullptr ? error : available ? "" : answer);
  nfn::unload_op_library(&lib);
  return out;
}

// {"supported": true, false or null (no CPU library opens), "reason", "bf16_units",
// "trainer_default"}: whether the CPU library (open in *cpu, or not) takes matmul=bf16, and
// the CPU trainer's rule for its default (bf16 where it is taken and the CPU has bf16 units).
nfn::Json bf16_matmul_json(nfn::Backend* cpu, const nfn::Json& cpu_library) {
  nfn::Json out = nfn::Json::object();
  const bool units = nfn::cpu_has_bf16_units();
  bool supported = false;
  if (cpu->ctx == nullptr) {
    out.set("supported", nfn::Json());
    out.set("reason", cpu_library.find("reason")->as_string());
  } else {
    supported = cpu->lib.ops.ctx_configure(cpu->ctx, "matmul", "bf16") == NFN_OK;
    out.set("supported", supported);
    out.set("reason", supported ? "" : cpu->lib.ops.ctx_last_error(cpu->ctx));
  }
  out.set("bf16_units", units);
  out.set("trainer_default", supported && units);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    std::fprintf(stderr, "nfn_op_probe: error: unknown argument %s (it takes none; see --help)\n", argv[i]);
    return 2;
  }
  nfn::Backend cuda, cpu, chosen;  // open until the end, as a trainer holds its library
  nfn::Json libraries = nfn::Json::object();
  libraries.set("cuda", library_json("cuda", &cuda));
  libraries.set("cpu", library_json("cpu", &cpu));
  nfn::Json report = nfn::Json::object();
  report.set("op_libraries", libraries);
  report.set("auto_backend", auto_json(&chosen));
  report.set("thunderkittens", thunderkittens_json());
  report.set("bf16_matmul", bf16_matmul_json(&cpu, *libraries.find("cpu")));
  std::printf("%s\n", report.dump(1).c_str());
  return 0;
}
