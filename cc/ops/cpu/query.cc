// nfn_ctx_query for the CPU library: the one key it answers is the device, the CPU's model.
#include <cstdio>
#include <cstring>
#include <string>

#include "cc/ops/cpu/context.h"

namespace nfn::cpu {

std::string cpu_model_name() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "";
  std::string model;
  char line[1024];
  while (model.empty() && std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "model name", 10) != 0) continue;
    const char* value = std::strchr(line, ':');
    if (value == nullptr) continue;
    model = value + 1;
    const size_t first = model.find_first_not_of(" \t"), last = model.find_last_not_of(" \t\r\n");
    model = first == std::string::npos ? "" : model.substr(first, last - first + 1);
  }
  std::fclose(f);
  return model;
}

}  // namespace nfn::cpu

extern "C" const char* nfn_ctx_query(const nfn_ctx* ctx, const char* key) {
  if (ctx == nullptr || key == nullptr) return nullptr;
  if (std::strcmp(key, "device") == 0) return ctx->device_name.c_str();
  return nullptr;
}
