#include "cuda/ops/tuned_picks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace nfn::cuda {

namespace {

constexpr const char* kFormat = "nfn gemm_tune picks 1";

// mkdir -p of the folder that holds `path`.
bool make_parent(const std::string& path, std::string* error) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
    const std::string dir = path.substr(0, at);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot make " + dir + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

// One pick line: kGemmKeyFields integers, ':', 8 hex words, nothing more.
bool parse_pick(const std::string& line, GemmKey* key, AlgoWords* algo, std::string* why) {
  std::istringstream in(line);
  for (int64_t& v : *key)
    if (!(in >> v)) {
      *why = "expected " + std::to_string(kGemmKeyFields) + " integers before ':'";
      return false;
    }
  std::string colon;
  if (!(in >> colon) || colon != ":") {
    *why = "expected ':' after the key";
    return false;
  }
  for (uint64_t& w : *algo) {
    std::string hex;
    char* end = nullptr;
    if (!(in >> hex) || hex.size() != 16 || (w = std::strtoull(hex.c_str(), &end, 16), *end != '\0')) {
      *why = "expected 8 words of 16 hex digits after ':'";
      return false;
    }
  }
  std::string extra;
  if (in >> extra) {
    *why = "unexpected '" + extra + "' after the 8 words";
    return false;
  }
  return true;
}

}  // namespace

std::string picks_header(const std::string& device, size_t cublaslt_version) {
  return std::string(kFormat) + " | " + device + " | cublasLt " + std::to_string(cublaslt_version);
}

std::string default_picks_path(const std::string& device, size_t cublaslt_version) {
  if (const char* file = std::getenv("NFN_GEMM_TUNE_CACHE"); file != nullptr && *file != '\0') return file;
  std::string root;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    root = xdg;
  else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    root = std::string(home) + "/.cache";
  else
    return "";
  std::string name = device.empty() ? "device" : device;
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')) c = '_';
  return root + "/nfn/gemm_tune/" + name + "-cublasLt" + std::to_string(cublaslt_version) + ".txt";
}

bool load_picks(TunedPicks* t, std::string* error) {
  t->picks.clear();
  std::ifstream in(t->path);
  if (!in) return true;  // none kept yet
  std::string line;
  if (!std::getline(in, line) || line != t->header) return true;  // another device, library or format
  for (int n = 2; std::getline(in, line); ++n) {
    GemmKey key;
    AlgoWords algo;
    std::string why;
    if (!parse_pick(line, &key, &algo, &why)) {
      *error = t->path + " line " + std::to_string(n) + ": " + why +
               " (a gemm_tune picks file; delete it to tune again)";
      t->picks.clear();
      return false;
    }
    t->picks[key] = algo;
  }
  return true;
}

bool save_picks(const TunedPicks& t, std::string* error) {
  if (t.path.empty()) {
    *error = "no file to keep gemm_tune's picks in";
    return false;
  }
  if (!make_parent(t.path, error)) return false;
  // Picks another process saved since t was read are kept beside t's (t's win a key both
  // have), so two runs tuning at once each add to the file instead of the last one's
  // replacing it. A file that does not parse is replaced.
  std::map<GemmKey, AlgoWords> picks = t.picks;
  TunedPicks on_disk{t.path, t.header, {}};
  std::string ignored;
  if (load_picks(&on_disk, &ignored)) picks.insert(on_disk.picks.begin(), on_disk.picks.end());
  const std::string tmp = t.path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    *error = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fprintf(f, "%s\n", t.header.c_str()) > 0;
  for (const auto& [key, algo] : picks) {
    for (int64_t v : key) ok = ok && std::fprintf(f, "%" PRId64 " ", v) > 0;
    ok = ok && std::fprintf(f, ":") > 0;
    for (uint64_t w : algo) ok = ok && std::fprintf(f, " %016" PRIx64, w) > 0;
    ok = ok && std::fprintf(f, "\n") > 0;
  }
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), t.path.c_str()) != 0) {
    *error = "cannot write " + t.path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace nfn::cuda
