// The resume rule has two halves in two languages. The trainer (C++) picks the checkpoint a
// directory's --resume continues (choose_resume) and applies its data position only on the same
// shards and the same seed, the checkpoint's seed read from its DONE marker (read_marker).
// `nfn train` (Python) picks that checkpoint again, before the trainer runs, to default the
// data, tokenizer and --seed to the resumed run's (py/nfn/train/launch.py, through
// py/nfn/infer/checkpoint.py, which `nfn infer` also uses without any trainer). If the halves
// disagree, `nfn train --resume` hands the trainer another run's seed or data, and the trainer
// quietly reads the data from the start (or refuses a seed it wrote itself).
//
// This test writes checkpoint directories as runs leave them (markers from manifest_json, for
// configs whose seed came through the trainer's own --seed parsing), asks Python's code which
// checkpoint and seed it takes, and checks that the trainer takes the same checkpoint and, given
// that seed back as --seed, the same seed as the marker: so the data position applies.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/train/manifest.h"
#include "cc/train/train_config.h"
#include "cc/util/files.h"
#include "cc/util/flags.h"
#include "tests/cc/expect.h"

namespace {

std::string error;

// A config resolved from flags, as the trainer gets one, with `seed` given as --seed.
bool config_with_seed(const std::string& seed, nfn::TrainConfig* c) {
  nfn::Flags flags("nfn_gpt_native_train", "");
  nfn::declare_train_flags(&flags);
  std::vector<std::string> args = {"nfn_gpt_native_train", "--seed", seed};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags.parse(static_cast<int>(argv.size()), argv.data(), &error) &&
         nfn::resolve_train_config(flags, c, &error);
}

void write(const std::string& path, const std::string& text) {
  EXPECT(nfn::write_file_atomic(path, text, &error), "%s", error.c_str());
}

// A complete checkpoint of `step` by run `run_id` with --seed `seed` ("" run id: an empty
// marker, from before run ids); its marker's manifest also becomes manifest.json, as the
// trainer writes them.
void checkpoint(const std::string& dir, int step, const std::string& run_id, const std::string& seed,
                const std::string& done_name = "") {
  write(nfn::join_path(dir, nfn::model_file_name(step)), "m");
  write(nfn::join_path(dir, nfn::state_file_name(step)), "s");
  std::string marker;
  if (!run_id.empty()) {
    nfn::TrainConfig c;
    EXPECT(config_with_seed(seed, &c), "--seed %s: %s", seed.c_str(), error.c_str());
    marker = nfn::manifest_json(c, nfn::model_file_name(step), step, 1, run_id, "x_train_000000.bin:100").dump(2);
    write(nfn::join_path(dir, "manifest.json"), marker);
  }
  write(nfn::join_path(dir, done_name.empty() ? nfn::done_file_name(step) : done_name), marker);
}

void manifest(const std::string& dir, const std::string& text) { write(nfn::join_path(dir, "manifest.json"), text); }

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// What Python's side takes in each directory: {dir: (step or -1, the --seed it passes or null)}.
const char* kPython = R"(
import argparse, json, sys
from nfn.errors import UserError
from nfn.infer import checkpoint
from nfn.train import launch
for d in sys.argv[1:]:
    try:
        step = checkpoint.resolve(d, for_resume=True).step
    except UserError:
        step = -1
    m = launch.resumed_manifest(argparse.Namespace(resume=d, output_dir=None, base_model="gpt"))
    t = (m or {}).get("training")
    seed = t.get("seed") if isinstance(t, dict) else None
    # launch.run takes the resumed run's seed as --seed when it is an int (str() of it)
    ok = isinstance(seed, int) and not isinstance(seed, bool)
    print(json.dumps({"dir": d, "step": step, "seed": str(seed) if ok else None}))
)";

}  // namespace

int main(int argc, char** argv) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string py = argc > 1 ? argv[1] : std::string(srcdir ? srcdir : ".") + "/nfn/py";
  char tmpl[] = "/tmp/nfn_resume_agreement_XXXXXX";
  const std::string root = mkdtemp(tmpl);
  std::vector<std::string> dirs;
  std::map<std::string, int> want;  // the step each directory's resume continues (-1: none)
  auto dir = [&](const std::string& name, int step) {
    const std::string d = nfn::join_path(root, name);
    want[d] = step;
    EXPECT(nfn::make_dirs(d, &error), "%s", error.c_str());
    dirs.push_back(d);
    return d;
  };
  // Run a (--seed 5) wrote 2, 4 and 6.
  auto run_a = [&](const std::string& d) {
    for (int step : {2, 4, 6}) checkpoint(d, step, "aaaaaaaaaaaaaaaa", "5");
  };
  std::string d = dir("fresh_run_after", 3);  // then run b (a seed past 2^53) started afresh here and wrote 3
  run_a(d);
  checkpoint(d, 3, "bbbbbbbbbbbbbbbb", "9007199254740993");
  d = dir("negative_seed", 2);  // --seed -1: the run's seed is 2^64 - 1
  checkpoint(d, 2, "dddddddddddddddd", "-1");
  d = dir("largest_seed", 2);
  checkpoint(d, 2, "dddddddddddddddd", "9223372036854775807");
  d = dir("rewound_incomplete", 4);  // a's branch from its step 2 stopped before step 5's marker
  run_a(d);
  manifest(d, R"({"step": 5, "run_id": "aaaaaaaaaaaaaaaa", "training": {"seed": 5}})");
  d = dir("rewound", 5);
  run_a(d);
  checkpoint(d, 5, "aaaaaaaaaaaaaaaa", "5");
  d = dir("last_run_left_none", -1);  // c stopped before its first marker: refused by both
  run_a(d);
  manifest(d, R"({"step": 8, "run_id": "cccccccccccccccc"})");
  d = dir("old_marker_below", 1);
  run_a(d);
  checkpoint(d, 1, "", "");
  manifest(d, R"({"step": 8, "run_id": "cccccccccccccccc"})");
  int legacy = 0;
  for (const char* text : {R"({"step": 3})", R"({"step": 3, "run_id": ""})", "not json", R"({"run_id": "b"})",
                           R"({"step": -1, "run_id": "b"})", R"({"step": 3.0, "run_id": "b"})",
                           R"({"step": 3.5, "run_id": "b"})", R"({"step": true, "run_id": "b"})",
                           R"({"step": "3", "run_id": "b"})"}) {
    d = dir("legacy_manifest_" + std::to_string(legacy++), 6);  // no usable run id or step: the newest of any run
    run_a(d);
    checkpoint(d, 3, "bbbbbbbbbbbbbbbb", "7");
    manifest(d, text);
  }
  d = dir("step_past_int", 6);
  run_a(d);
  manifest(d, R"({"step": 99999999999, "run_id": "aaaaaaaaaaaaaaaa"})");
  d = dir("signed_marker_name", 6);  // "DONE_+0000007" is no step's marker
  run_a(d);
  checkpoint(d, 7, "aaaaaaaaaaaaaaaa", "5", "DONE_+0000007");
  manifest(d, R"({"step": 7, "run_id": "aaaaaaaaaaaaaaaa"})");
  d = dir("incomplete_newest", 6);  // step 8's model without its marker
  run_a(d);
  write(nfn::join_path(d, nfn::model_file_name(8)), "m");
  d = dir("newest_without_state", 4);  // step 6's optimizer state deleted: a resume needs it
  run_a(d);
  EXPECT(std::remove(nfn::join_path(d, nfn::state_file_name(6)).c_str()) == 0, "removing step 6's state");
  d = dir("empty", -1);

  // Python's answers.
  std::string cmd = "cd / && PYTHONPATH=" + shell_quote(py) + " python3 -c " + shell_quote(kPython);
  for (const std::string& x : dirs) cmd += " " + shell_quote(x);
  std::map<std::string, nfn::Json> python;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, p)) {
      nfn::Json j;
      EXPECT(nfn::Json::parse(line, &j, &error), "python said %s (%s)", line, error.c_str());
      if (j.is_object() && j.find("dir") != nullptr) python[j.find("dir")->as_string()] = j;
    }
    EXPECT(pclose(p) == 0, "python3 failed (PYTHONPATH=%s)", py.c_str());
  }
  EXPECT(python.size() == dirs.size(), "python answered for %zu of %zu directories", python.size(), dirs.size());

  for (const std::string& x : dirs) {
    const std::string name = x.substr(root.size() + 1);
    auto it = python.find(x);
    if (it == python.end()) continue;
    const int py_step = static_cast<int>(it->second.find("step")->as_number());
    const int cc_step = nfn::choose_resume(x).step;
    EXPECT(py_step == cc_step && cc_step == want[x], "%s: Python continues step %d, the trainer step %d (want %d)",
           name.c_str(), py_step, cc_step, want[x]);
    if (cc_step < 0 || py_step != cc_step) continue;
    const nfn::Marker marker = nfn::read_marker(x, cc_step);
    if (!marker.has_seed) continue;  // a marker from before run ids: the trainer checks no order
    const nfn::Json* seed = it->second.find("seed");
    EXPECT(seed != nullptr && seed->is_string(), "%s: Python passes no --seed, the marker has %llu", name.c_str(),
           static_cast<unsigned long long>(marker.seed));
    if (seed == nullptr || !seed->is_string()) continue;
    nfn::TrainConfig c;
    const bool parsed = config_with_seed(seed->as_string(), &c);
    EXPECT(parsed && c.seed == marker.seed, "%s: --seed %s (%s) is %llu to the trainer, its marker says %llu",
           name.c_str(), seed->as_string().c_str(), parsed ? "taken" : error.c_str(),
           static_cast<unsigned long long>(c.seed), static_cast<unsigned long long>(marker.seed));
  }
  // The seeds the runs gave, as the markers hold them.
  EXPECT(nfn::read_marker(nfn::join_path(root, "fresh_run_after"), 3).seed == 9007199254740993ull, "2^53 + 1");
  EXPECT(nfn::read_marker(nfn::join_path(root, "negative_seed"), 2).seed == UINT64_MAX, "-1");
  std::system(("rm -rf " + shell_quote(root)).c_str());
  return nfn_test::finish("resume_agreement_test");
}
