// Which checkpoint a directory's resume continues (cc/train/manifest.h): the step its
// manifest.json names, else that run's newest complete step below it; markers from before
// run ids count for any run, and a manifest without a run id means the newest of any run.
#include "cc/train/manifest.h"
#include "cc/train/resume.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cc/ckpt/checkpoint.h"
#include "cc/util/files.h"
#include "tests/cc/expect.h"

namespace {

std::string error;

void write(const std::string& path, const std::string& text) {
  EXPECT(nfn::write_file_atomic(path, text, &error), "%s", error.c_str());
}

// A complete checkpoint of `step` whose marker is run `run_id`'s manifest ("": an empty
// marker, from before run ids).
void checkpoint(const std::string& dir, int step, const std::string& run_id) {
  write(nfn::join_path(dir, nfn::model_file_name(step)), "m");
  write(nfn::join_path(dir, nfn::state_file_name(step)), "s");
  write(nfn::join_path(dir, nfn::done_file_name(step)),
        run_id.empty() ? "" : "{\"step\": " + std::to_string(step) + ", \"run_id\": \"" + run_id + "\"}\n");
}

void manifest(const std::string& dir, const std::string& text) { write(nfn::join_path(dir, "manifest.json"), text); }

}  // namespace

int main() {
  char tmpl[] = "/tmp/nfn_manifest_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  // Run a wrote 2, 4 and 6; run b, started afresh here, wrote 3; then a rewound branch of
  // run a (resumed from its step 2) wrote 5.
  checkpoint(dir, 2, "a");
  checkpoint(dir, 4, "a");
  checkpoint(dir, 6, "a");
  checkpoint(dir, 3, "b");
  EXPECT(nfn::read_marker(dir, 3).run_id == "b" && nfn::read_marker(dir, 7).run_id.empty(), "read_marker's run_id");
  EXPECT(nfn::newest_step_of_run(dir, "a", 1000) == 6 && nfn::newest_step_of_run(dir, "a", 5) == 4 &&
             nfn::newest_step_of_run(dir, "b", 1000) == 3 && nfn::newest_step_of_run(dir, "c", 1000) == -1,
         "newest_step_of_run");

  manifest(dir, "{\"step\": 3, \"run_id\": \"b\"}");  // b wrote last: its step, not a's later 6
  nfn::ResumeChoice r = nfn::choose_resume(dir);
  EXPECT(r.step == 3 && r.newest_any == 6 && r.run_id == "b" && r.manifest_step == 3, "b: %d", r.step);
  manifest(dir, "{\"step\": 5, \"run_id\": \"a\"}");  // a's branch was stopped before step 5's marker
  r = nfn::choose_resume(dir);
  EXPECT(r.step == 4, "a's branch at 5, incomplete: %d", r.step);
  checkpoint(dir, 5, "a");
  EXPECT(nfn::choose_resume(dir).step == 5, "a's branch at 5: %d (not its abandoned 6)", nfn::choose_resume(dir).step);
  manifest(dir, "{\"step\": 8, \"run_id\": \"c\"}");  // c stopped before its first marker
  r = nfn::choose_resume(dir);
  EXPECT(r.step == -1 && r.newest_any == 6 && r.run_id == "c", "c: %d", r.step);
  checkpoint(dir, 1, "");  // a marker from before run ids is any run's
  EXPECT(nfn::choose_resume(dir).step == 1, "c with an old marker below: %d", nfn::choose_resume(dir).step);
  for (const char* legacy : {"{\"step\": 3}", "{\"step\": 3, \"run_id\": \"\"}", "not json", "{\"run_id\": \"b\"}",
                             "{\"step\": -1, \"run_id\": \"b\"}", "{\"step\": 3.0, \"run_id\": \"b\"}",
                             "{\"step\": 3.5, \"run_id\": \"b\"}", "{\"step\": true, \"run_id\": \"b\"}",
                             "{\"step\": \"3\", \"run_id\": \"b\"}"}) {
    manifest(dir, legacy);  // no run id or whole step: the newest of any run, as before run ids
    EXPECT(nfn::choose_resume(dir).step == 6, "%s: %d", legacy, nfn::choose_resume(dir).step);
  }
  manifest(dir, "{\"step\": 99999999999, \"run_id\": \"a\"}");  // past any step: a's newest
  EXPECT(nfn::choose_resume(dir).step == 6, "a step past int: %d", nfn::choose_resume(dir).step);
  // Without the need for state files (sampling): the same rule over the steps whose model and
  // marker are there. a's 6 without its state is a's newest for sampling, not for a resume.
  EXPECT(std::remove(nfn::join_path(dir, nfn::state_file_name(6)).c_str()) == 0, "removing step 6's state");
  EXPECT(nfn::choose_resume(dir).step == 5 && nfn::choose_resume(dir, false).step == 6,
         "without step 6's state: resume %d, sampling %d", nfn::choose_resume(dir).step,
         nfn::choose_resume(dir, false).step);
  std::system(("rm -rf " + dir).c_str());
  EXPECT(nfn::choose_resume(dir).step == -1, "an absent directory");
  const std::string id1 = nfn::new_run_id(), id2 = nfn::new_run_id();
  EXPECT(id1.size() == 16 && id1.find_first_not_of("0123456789abcdef") == std::string::npos && id1 != id2,
         "new_run_id: %s %s", id1.c_str(), id2.c_str());
  // A checkpoint's shards are the same shards under either naming (fineweb_* or the dataset's).
  EXPECT(nfn::same_shards("fineweb_train_000000.bin:10,fineweb_train_000001.bin:7",
                          "shakespeare_train_000000.bin:10,shakespeare_train_000001.bin:7"),
         "same shards under another prefix");
  EXPECT(!nfn::same_shards("fineweb_train_000000.bin:10", "shakespeare_train_000000.bin:11"), "other token counts");
  EXPECT(!nfn::same_shards("a_train_000000.bin:10", "a_train_000001.bin:10"), "other shard");
  EXPECT(nfn::same_shards("my-set_val_000000.bin:3", "x_val_000000.bin:3"), "val shards");
  return nfn_test::finish("manifest_test");
}
