// gemm_tune's picks file (cuda/ops/tuned_picks.h) on the host: written and read back word for
// word; a save keeps the picks another process saved since; another device's or library's
// file is ignored, not trusted; a line that does not parse is one error naming the file and
// line; a save makes its folder and leaves nothing beside the file; the default path follows
// NFN_GEMM_TUNE_CACHE, XDG_CACHE_HOME and HOME.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cuda/ops/tuned_picks.h"
#include "tests/cc/expect.h"

using nfn::cuda::AlgoWords;
using nfn::cuda::GemmKey;
using nfn::cuda::TunedPicks;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/nfn_tuned_picks_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir ? dir : "/tmp";
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

int entries(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// A key like cublaslt.cc's: trans flags, shape, leading dimensions, dtypes, epilogue, beta,
// alignments, gemm_tune; negative and large values to prove the text keeps every bit.
GemmKey key(int64_t m) { return {1, 0, m, 16384, 768, 768, 768, m, 1, 1, 5, 1, 256, 256, 256, 256, 16, 256, 1}; }

void test_round_trip(const std::string& dir) {
  TunedPicks t;
  t.path = dir + "/deeper/still/picks.txt";  // folders made by the save
  t.header = nfn::cuda::picks_header("NVIDIA H200", 130001);
  t.picks[key(2304)] = AlgoWords{0, 1, 0xffffffffffffffffull, 0x8000000000000000ull, 42, 7, 0x0123456789abcdefull, 3};
  t.picks[key(-1)] = AlgoWords{9, 8, 7, 6, 5, 4, 3, 2};
  std::string error;
  EXPECT(nfn::cuda::save_picks(t, &error), "save: %s", error.c_str());
  EXPECT(entries(dir + "/deeper/still") == 1, "a save leaves only the file, not %d entries",
         entries(dir + "/deeper/still"));
  TunedPicks back;
  back.path = t.path;
  back.header = t.header;
  EXPECT(nfn::cuda::load_picks(&back, &error), "load: %s", error.c_str());
  EXPECT(back.picks == t.picks, "the picks read back differ from those written (%zu read)", back.picks.size());
  std::ifstream in(t.path);
  std::string first;
  std::getline(in, first);
  EXPECT(first == "nfn gemm_tune picks 1 | NVIDIA H200 | cublasLt 130001", "header line: %s", first.c_str());

  // Another device or cuBLASLt version: not trusted, and not an error.
  for (const std::string& other : {nfn::cuda::picks_header("NVIDIA H100", 130001),
                                   nfn::cuda::picks_header("NVIDIA H200", 130100)}) {
    TunedPicks elsewhere;
    elsewhere.path = t.path;
    elsewhere.header = other;
    EXPECT(nfn::cuda::load_picks(&elsewhere, &error) && elsewhere.picks.empty(),
           "a file for another device or library gave %zu picks", elsewhere.picks.size());
  }
  // A save keeps what another process saved since (its keys beside ours; ours win a key both
  // have), so runs tuning at once add to the file.
  TunedPicks other;
  other.path = t.path;
  other.header = t.header;
  other.picks[key(4096)] = AlgoWords{1, 1, 1, 1, 1, 1, 1, 1};
  other.picks[key(2304)] = AlgoWords{2, 2, 2, 2, 2, 2, 2, 2};
  EXPECT(nfn::cuda::save_picks(other, &error), "save: %s", error.c_str());
  TunedPicks merged;
  merged.path = t.path;
  merged.header = t.header;
  EXPECT(nfn::cuda::load_picks(&merged, &error), "load: %s", error.c_str());
  EXPECT(merged.picks.size() == 3 && merged.picks[key(4096)] == other.picks[key(4096)] &&
             merged.picks[key(2304)] == other.picks[key(2304)] && merged.picks[key(-1)] == t.picks[key(-1)],
         "a save dropped or overrode another's picks (%zu kept)", merged.picks.size());

  // No file yet: no picks.
  TunedPicks none;
  none.path = dir + "/missing.txt";
  none.header = t.header;
  EXPECT(nfn::cuda::load_picks(&none, &error) && none.picks.empty(), "a missing file gave picks");
}

void test_bad_lines(const std::string& dir) {
  const std::string header = nfn::cuda::picks_header("NVIDIA H200", 130001);
  const std::string good = "1 0 2304 16384 768 768 768 2304 1 1 5 1 256 256 256 256 16 256 1 : "
                           "0000000000000000 0000000000000001 0000000000000002 0000000000000003 "
                           "0000000000000004 0000000000000005 0000000000000006 0000000000000007";
  struct Case {
    std::string line, why;
  } cases[] = {
      {"1 0 2304 : 0000000000000000", "expected 19 integers before ':'"},
      {"1 0 2304 16384 768 768 768 2304 1 1 5 1 256 256 256 256 16 256 1 0000000000000000", "expected ':'"},
      {good.substr(0, good.size() - 17), "expected 8 words of 16 hex digits"},
      {good.substr(0, good.size() - 1) + "g", "expected 8 words of 16 hex digits"},
      {good + " 1", "unexpected '1' after the 8 words"},
  };
  for (const Case& c : cases) {
    TunedPicks t;
    t.path = dir + "/bad.txt";
    t.header = header;
    write(t.path, header + "\n" + good + "\n" + c.line + "\n");
    std::string error;
    const bool ok = nfn::cuda::load_picks(&t, &error);
    EXPECT(!ok && t.picks.empty(), "a bad line was accepted: %s", c.line.c_str());
    EXPECT(error.find(t.path + " line 3: " + c.why) == 0, "error for '%s': %s", c.line.c_str(), error.c_str());
  }
}

void test_unwritable(const std::string& dir) {
  TunedPicks t;
  write(dir + "/a_file", "x");
  t.path = dir + "/a_file/picks.txt";  // its folder is a file
  t.header = "h";
  std::string error;
  EXPECT(!nfn::cuda::save_picks(t, &error) && !error.empty(), "a save under a file succeeded");
}

void test_default_path() {
  setenv("NFN_GEMM_TUNE_CACHE", "/x/picks.txt", 1);
  EXPECT(nfn::cuda::default_picks_path("NVIDIA H200", 130001) == "/x/picks.txt", "NFN_GEMM_TUNE_CACHE");
  unsetenv("NFN_GEMM_TUNE_CACHE");
  setenv("XDG_CACHE_HOME", "/c", 1);
  const std::string p = nfn::cuda::default_picks_path("NVIDIA H200 NVL/x", 130001);
  EXPECT(p == "/c/nfn/gemm_tune/NVIDIA_H200_NVL_x-cublasLt130001.txt", "XDG_CACHE_HOME: %s", p.c_str());
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/h", 1);
  EXPECT(nfn::cuda::default_picks_path("GPU", 1) == "/h/.cache/nfn/gemm_tune/GPU-cublasLt1.txt", "HOME");
  unsetenv("HOME");
  EXPECT(nfn::cuda::default_picks_path("GPU", 1).empty(), "no home: no default file");
}

}  // namespace

int main() {
  const std::string dir = temp_dir();
  test_round_trip(dir);
  test_bad_lines(dir);
  test_unwritable(dir);
  test_default_path();
  return nfn_test::finish("tuned_picks_test");
}
