// Checkpoint files streamed from a FloatSource, a chunk at a time: a model with more
// parameters than one chunk (4M) round-trips bit for bit in f32, and as bf16 rounded to
// nearest even (checked against a rounding written here); the state file keeps its fields and
// both moments; a source that fails part-way leaves no file and no temp file, and the file
// already at that path untouched.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cc/ckpt/checkpoint.h"
#include "cc/util/files.h"
#include "tests/cc/expect.h"

using namespace nfn;

namespace {

std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = (static_cast<float>(x >> 8) / 16777216.f - 0.5f) * std::ldexp(1.f, static_cast<int>(x % 7) - 3);
  }
  return v;
}

// Round to nearest even by the bits (finite values).
float bf16_round(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t lower = b & 0xffffu, half = 0x8000u;
  uint32_t upper = b >> 16;
  if (lower > half || (lower == half && (upper & 1u))) ++upper;
  b = upper << 16;
  std::memcpy(&f, &b, 4);
  return f;
}

// A source over v that records the ranges asked of it and may fail at one offset.
struct Recorded {
  const std::vector<float>* v;
  size_t fail_at = SIZE_MAX, next = 0, calls = 0;
  bool in_order = true;
  FloatSource source() {
    return [this](size_t offset, size_t count, float* dst, std::string* error) {
      in_order = in_order && offset == next;
      next = offset + count;
      ++calls;
      if (offset >= fail_at) {
        *error = "source failed at " + std::to_string(offset);
        return false;
      }
      std::memcpy(dst, v->data() + offset, count * 4);
      return true;
    };
  }
};

bool no_temp_files(const std::string& dir) {
  for (const std::string& name : list_dir(dir))
    if (name.find(".tmp.") != std::string::npos) return false;
  return true;
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/nfn_checkpoint_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  GPTConfig c;
  c.max_seq_len = 64, c.vocab_size = 16000, c.padded_vocab_size = 16384;
  c.num_layers = 1, c.num_heads = 4, c.channels = 256;
  const size_t n = num_parameters(c);
  EXPECT(n > (size_t{1} << 22) && n % (size_t{1} << 22) != 0, "%zu parameters: want more than one chunk, the last partial", n);
  const std::vector<float> params = values(n, 7);

  // f32: bit for bit, in two or more ranges asked in order.
  const std::string f32_path = join_path(dir, model_file_name(3));
  std::string error;
  Recorded rec{&params};
  EXPECT(write_model_file(f32_path, c, rec.source(), kModelVersionF32, &error), "write f32: %s", error.c_str());
  EXPECT(rec.calls >= 2 && rec.in_order && rec.next == n, "f32 source: %zu calls, in order %d, ended at %zu",
         rec.calls, rec.in_order, rec.next);
  GPTConfig got;
  std::vector<float> back;
  EXPECT(read_model_file(f32_path, &got, &back, &error), "read f32: %s", error.c_str());
  EXPECT(back.size() == n && std::memcmp(back.data(), params.data(), n * 4) == 0, "f32 parameters changed");
  EXPECT(got.vocab_size == c.vocab_size && got.padded_vocab_size == c.padded_vocab_size && got.channels == c.channels,
         "f32 header geometry changed");

  // bf16: each value rounded to nearest even.
  const std::string bf16_path = join_path(dir, "model_bf16.bin");
  EXPECT(write_model_file(bf16_path, c, from_host(params), kModelVersionBF16, &error), "write bf16: %s", error.c_str());
  EXPECT(read_model_file(bf16_path, &got, &back, &error), "read bf16: %s", error.c_str());
  size_t wrong = 0;
  for (size_t i = 0; i < n && back.size() == n; ++i) wrong += back[i] != bf16_round(params[i]);
  EXPECT(back.size() == n && wrong == 0, "bf16: %zu of %zu values not rounded to nearest even", wrong, n);

  // State: the fields and both moments.
  TrainState st;
  st.step = 3, st.rng_state = 0x1234567890abcdefull, st.data_epoch = 2, st.data_shard = 5, st.data_offset = 77;
  st.num_parameters = n;
  const std::vector<float> m = values(n, 11), v = values(n, 13);
  const std::string state_path = join_path(dir, state_file_name(3));
  EXPECT(write_state_file(state_path, st, from_host(m), from_host(v), &error), "write state: %s", error.c_str());
  TrainState rs;
  EXPECT(read_state_file(state_path, &rs, &error), "read state: %s", error.c_str());
  EXPECT(rs.step == 3 && rs.rng_state == st.rng_state && rs.data_epoch == 2 && rs.data_shard == 5 &&
             rs.data_offset == 77 && rs.num_parameters == n,
         "state fields changed");
  EXPECT(rs.m == m && rs.v == v, "moments changed");
  EXPECT(!rs.has_master, "a state written without master weights says it has them");

  // With the f32 master weights after the moments (a bf16 model file's run): header [4] is 1,
  // the file 12 bytes a parameter, and the weights come back whole, not rounded.
  const std::string master_path = join_path(dir, state_file_name(4));
  const FloatSource master = from_host(params);
  EXPECT(write_state_file(master_path, st, from_host(m), from_host(v), &error, &master), "write state + master: %s",
         error.c_str());
  TrainState ms;
  std::vector<float> weights(n, 0.f);
  const FloatSink into_weights = [&weights](size_t offset, size_t count, const float* src, std::string*) {
    std::copy(src, src + count, weights.begin() + static_cast<std::ptrdiff_t>(offset));
    return true;
  };
  auto file_size = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    return static_cast<size_t>(f.tellg());
  };
  EXPECT(read_state_header(master_path, &ms, &error) && ms.has_master, "master weights not flagged: %s",
         error.c_str());
  EXPECT(file_size(master_path) == 1024 + 12 * n, "state + master size %zu", file_size(master_path));
  EXPECT(read_state_master(master_path, ms, into_weights, &error) && weights == params,
         "master weights changed: %s", error.c_str());
  EXPECT(!read_state_master(state_path, rs, into_weights, &error) &&
             error.find("holds no master weights") != std::string::npos,
         "a state without master weights must say so, got: %s", error.c_str());

  // A source failing in its second chunk: false with its reason, the old file intact, no temp.
  Recorded failing{&m};
  failing.fail_at = size_t{1} << 22;
  EXPECT(!write_model_file(f32_path, c, failing.source(), kModelVersionF32, &error) &&
             error.find("source failed at") != std::string::npos,
         "a failing source must fail the write with its reason, got: %s", error.c_str());
  EXPECT(read_model_file(f32_path, &got, &back, &error) && back == params, "the file already there was changed");
  EXPECT(!write_state_file(join_path(dir, "state_new.bin"), st, from_host(m), failing.source(), &error),
         "a failing moment source must fail the state write");
  EXPECT(!path_exists(join_path(dir, "state_new.bin")), "a failed write left its file");
  EXPECT(no_temp_files(dir), "a failed write left a temp file");

  // Complete steps: DONE marker, model and state file all present, newest first.
  const std::string steps_dir = join_path(dir, "steps");
  EXPECT(make_dirs(steps_dir, &error), "%s", error.c_str());
  for (int step : {2, 4, 6, 10}) {
    const bool state = step != 6, done = step != 10;
    EXPECT(write_file_atomic(join_path(steps_dir, model_file_name(step)), "m", &error) &&
               (!state || write_file_atomic(join_path(steps_dir, state_file_name(step)), "s", &error)) &&
               (!done || write_file_atomic(join_path(steps_dir, done_file_name(step)), "", &error)),
           "%s", error.c_str());
  }
  // A marker named with a sign or a space is no step's: step 10 (model and state, no marker)
  // stays incomplete, whatever %8d would read in those names.
  EXPECT(write_file_atomic(join_path(steps_dir, "DONE_+0000010"), "", &error) &&
             write_file_atomic(join_path(steps_dir, "DONE_ 0000010"), "", &error),
         "%s", error.c_str());
  EXPECT(complete_steps(steps_dir) == std::vector<int>({4, 2}), "complete_steps");
  // Sampling needs the model and its marker alone: step 6 lacks only its state.
  EXPECT(complete_steps(steps_dir, false) == std::vector<int>({6, 4, 2}), "complete_steps without state");
  EXPECT(newest_complete_step(steps_dir) == 4 && newest_complete_step(join_path(dir, "absent")) == -1 &&
             newest_complete_step(steps_dir, false) == 6,
         "newest_complete_step");

  std::system(("rm -rf " + dir).c_str());
  return nfn_test::finish("checkpoint_test");
}
