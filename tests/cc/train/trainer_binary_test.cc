// The trainer binary (cc/bin:nfn_gpt_native_train) on what it must refuse before it trains:
// an --output-dir nothing can be written in, though access(W_OK) says otherwise (root on /proc
// and /sys), found by --check without leaving anything behind; and a resumed checkpoint whose
// data position is past the last epoch the sampler's counter takes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/util/files.h"
#include "tests/cc/child.h"
#include "tests/cc/expect.h"

namespace {

std::string trainer;
std::string tmp;

struct Run {
  int code = -1;
  std::string err;  // stderr
};

// The trainer run with `args` in a child (stdout dropped): its exit status and stderr.
Run run(const std::vector<std::string>& args) {
  const nfn_test::ChildResult r = nfn_test::run_in_child([&] {
    std::vector<char*> argv{const_cast<char*>(trainer.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execv(trainer.c_str(), argv.data());
    _exit(127);
  });
  return Run{r.signal != 0 ? -1 : r.exit_code, r.err};
}

std::vector<std::string> names_in(const std::string& dir) { return nfn::list_dir(dir); }

// An llm.c uint16 shard of `n` tokens, ids below 64.
void write_shard(const std::string& path, int n) {
  int32_t header[256] = {20240520, 1, n};
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(header, 4, 256, f);
  for (int i = 0; i < n; ++i) {
    const uint16_t t = static_cast<uint16_t>((i * 7 + 3) % 64);
    std::fwrite(&t, 2, 1, f);
  }
  std::fclose(f);
}

void test_check_finds_an_unwritable_output_dir() {
  const std::string base = tmp + "/check";
  mkdir(base.c_str(), 0755);
  // Writable: a directory to be made, and one that exists; nothing is left in either.
  for (const std::string& out : {base + "/new/deeper", base}) {
    const Run r = run({"--check", "--backend", "cpu", "--output-dir", out});
    EXPECT(r.code == 0, "--check --output-dir %s: exit %d: %s", out.c_str(), r.code, r.err.c_str());
    EXPECT(names_in(base).empty(), "%s: --check left %zu names in %s", out.c_str(), names_in(base).size(),
           base.c_str());
  }
  const std::string file = base + "/a_file";
  write_shard(file, 1);
  Run r = run({"--check", "--backend", "cpu", "--output-dir", file + "/out"});
  EXPECT(r.code == 1 && r.err == "nfn_gpt_native_train: error: --output-dir " + file + "/out: " + file +
                                     " is not a directory\n",
         "under a file: exit %d: %s", r.code, r.err.c_str());
  std::remove(file.c_str());
  // Directories access() calls writable where no file can be made: root's view of /proc and
  // /sys. Each such one here is refused in one line naming it.
  if (geteuid() != 0) {
    std::printf("skipped the /proc and /sys cases: not root\n");
    return;
  }
  int tried = 0;
  for (const std::string dir : {"/proc", "/sys", "/sys/kernel"}) {
    if (access(dir.c_str(), W_OK | X_OK) != 0) continue;  // mounted read-only here: access() says so itself
    ++tried;
    const std::string out = dir + "/nfn_trainer_binary_test/out";
    r = run({"--check", "--backend", "cpu", "--output-dir", out});
    const std::string want = "nfn_gpt_native_train: error: --output-dir " + out + ": " + dir +
                             " is not writable (creating a file there: ";
    EXPECT(r.code == 1 && r.err.compare(0, want.size(), want) == 0 && r.err.find('\n') == r.err.size() - 1,
           "--output-dir %s: exit %d: %s", out.c_str(), r.code, r.err.c_str());
  }
  std::printf("%d of /proc, /sys and /sys/kernel writable to access() here\n", tried);
}

void test_resume_past_the_last_epoch_is_refused() {
  const std::string data = tmp + "/data", out = tmp + "/resume";
  mkdir(data.c_str(), 0755);
  write_shard(data + "/tiny_train_000000.bin", 200);  // 8-token windows: offsets 0, 8, .., 184
  const std::vector<std::string> common = {
      "--train-data", data,  "--vocab-size", "64", "--num-layers", "1", "--num-heads", "1", "--model-dim", "16",
      "--train-seq-len", "8", "--batch-size", "1", "--train-batch-tokens", "8", "--eval-batches", "0",
      "--backend", "cpu", "--threads", "1", "--seed", "0", "--output-dir", out};
  std::vector<std::string> args = common;
  for (const char* a : {"--max-steps", "1", "--checkpoint-every", "1"}) args.push_back(a);
  Run r = run(args);
  EXPECT(r.code == 0, "one step: exit %d: %s", r.code, r.err.c_str());
  // The state file's data position: [30..31] shard, [32..33] offset, [34..35] epoch (u64 each).
  const std::string state = out + "/state_00000001_00000.bin";
  std::string bytes, error;
  EXPECT(nfn::read_file(state, &bytes, &error) && bytes.size() > 1024, "%s", error.c_str());
  if (bytes.size() <= 1024) return;
  const uint64_t shard = 0, offset = 192, epoch = INT64_MAX;  // past the last window: the epoch's end
  std::memcpy(&bytes[30 * 4], &shard, 8);
  std::memcpy(&bytes[32 * 4], &offset, 8);
  std::memcpy(&bytes[34 * 4], &epoch, 8);
  EXPECT(nfn::write_file_atomic(state, bytes, &error), "%s", error.c_str());
  args = common;
  for (const char* a : {"--max-steps", "2", "--checkpoint-every", "1", "--resume", "auto"}) args.push_back(a);
  r = run(args);
  const std::string want = "nfn_gpt_native_train: error: " + state +
                           ": data position: epoch 9223372036854775807 is past the last one the sampler takes "
                           "(4611686018427387903)\n";
  EXPECT(r.code == 1 && r.err.size() >= want.size() && r.err.compare(r.err.size() - want.size(), want.size(), want) == 0,
         "resumed past the last epoch: exit %d: %s", r.code, r.err.c_str());
  EXPECT(!nfn::path_exists(out + "/DONE_00000002"), "no step 2 written");
}

void test_resume_keeps_the_data_order_of_any_seed() {
  // The marker records the seed exactly (it once held 2^53 + 1 as 2^53, and -1 as 2^64):
  // resumed with the same --seed, the run goes on in its data; with another, the note says it
  // reads from the start.
  const std::string data = tmp + "/four";
  mkdir(data.c_str(), 0755);
  for (int i = 0; i < 4; ++i) write_shard(data + "/x_train_00000" + std::to_string(i) + ".bin", 40);
  auto args = [&](const std::string& out, const std::string& seed, const char* steps) {
    return std::vector<std::string>{
        "--train-data", data, "--vocab-size", "64", "--num-layers", "1", "--num-heads", "1", "--model-dim", "16",
        "--train-seq-len", "8", "--batch-size", "1", "--train-batch-tokens", "8", "--eval-batches", "0",
        "--backend", "cpu", "--threads", "1", "--output-dir", out, "--checkpoint-every", "1", "--seed", seed,
        "--max-steps", steps, "--resume", "auto"};  // auto: afresh in an empty directory
  };
  const std::string note = "reading the data from the start";
  for (const std::string seed : {"9007199254740993", "-1"}) {
    const std::string out = tmp + "/seeded" + seed;
    Run r = run(args(out, seed, "1"));
    EXPECT(r.code == 0, "--seed %s: exit %d: %s", seed.c_str(), r.code, r.err.c_str());
    std::string marker, error;
    nfn::read_file(out + "/DONE_00000001", &marker, &error);
    EXPECT(marker.find("\"seed\": " + seed + "\n") != std::string::npos, "--seed %s: the marker: %s", seed.c_str(),
           marker.c_str());
    r = run(args(out, seed, "2"));
    EXPECT(r.code == 0 && r.err.find(note) == std::string::npos, "--seed %s resumed: exit %d: %s", seed.c_str(),
           r.code, r.err.c_str());
  }
  const Run r = run(args(tmp + "/seeded-1", "9007199254740992", "3"));  // another seed: another shard order
  EXPECT(r.code == 0 && r.err.find(note) != std::string::npos, "another seed resumed: exit %d: %s", r.code,
         r.err.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  trainer = argc > 1 ? argv[1] : std::string(srcdir ? srcdir : ".") + "/nfn/cc/bin/nfn_gpt_native_train";
  char tmpl[] = "/tmp/nfn_trainer_binary_testXXXXXX";
  tmp = tmpdir ? tmpdir : mkdtemp(tmpl);
  if (!nfn::path_exists(trainer)) {
    std::printf("no trainer at %s\n", trainer.c_str());
    return 1;
  }
  test_check_finds_an_unwritable_output_dir();
  test_resume_past_the_last_epoch_is_refused();
  test_resume_keeps_the_data_order_of_any_seed();
  return nfn_test::finish("trainer_binary_test");
}
