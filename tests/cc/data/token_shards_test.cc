// Token shard discovery, validation and the batch sampler, on shards this test writes
// byte by byte (llm.c's layout), checked against the token values it wrote.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cc/data/token_shards.h"
#include "tests/cc/expect.h"

using nfn::data::TokenBatchSampler;
using nfn::data::TokenShard;


static std::string tmp_root;

static std::string make_dir(const std::string& name) {
  std::string d = tmp_root + "/" + name;
  mkdir(d.c_str(), 0755);
  return d;
}

// Token value i of shard `salt`: distinct across shards so a batch names its source.
static uint32_t token_at(int salt, int64_t i) { return static_cast<uint32_t>((salt * 1000 + i) % 60000); }

// Writes an llm.c shard: header ints (magic, version, ntok) then the tokens, little-endian.
static void write_shard(const std::string& path, int salt, int64_t ntok, int token_bytes = 2,
                        int32_t magic = 0, int32_t version = -1, int64_t extra_bytes = 0) {
  int32_t header[256] = {0};
  header[0] = magic ? magic : (token_bytes == 2 ? 20240520 : 20240801);
  header[1] = version >= 0 ? version : (token_bytes == 2 ? 1 : 7);
  header[2] = static_cast<int32_t>(ntok);
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(header, 4, 256, f);
  for (int64_t i = 0; i < ntok + extra_bytes / token_bytes; ++i) {
    uint32_t v = token_at(salt, i);
    if (token_bytes == 2) {
      uint16_t h = static_cast<uint16_t>(v);
      std::fwrite(&h, 2, 1, f);
    } else {
      std::fwrite(&v, 4, 1, f);
    }
  }
  std::fclose(f);
}

static bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

static void test_discovery() {
  std::string d = make_dir("disc");
  write_shard(d + "/fineweb_train_000001.bin", 1, 50);
  write_shard(d + "/fineweb_train_000000.bin", 0, 40);
  write_shard(d + "/fineweb_val_000000.bin", 9, 30);
  write_shard(d + "/notes.txt", 0, 1);
  std::vector<TokenShard> train, val;
  std::string err;
  EXPECT(nfn::data::find_shards(d, "train", &train, &err), "find train: %s", err.c_str());
  EXPECT(train.size() == 2, "two train shards, got %zu", train.size());
  if (train.size() == 2) {
    EXPECT(train[0].path == d + "/fineweb_train_000000.bin", "sorted by name: %s", train[0].path.c_str());
    EXPECT(train[0].num_tokens == 40 && train[1].num_tokens == 50, "counts from headers");
    EXPECT(train[0].token_bytes == 2, "uint16 shard");
  }
  EXPECT(nfn::data::total_tokens(train) == 90, "total");
  EXPECT(nfn::data::find_validation_siblings(d + "/fineweb_train_000001.bin", &val, &err), "%s", err.c_str());
  EXPECT(val.size() == 1 && val[0].num_tokens == 30, "val sibling");
  // One file: the split is ignored.
  EXPECT(nfn::data::find_shards(d + "/fineweb_val_000000.bin", "train", &val, &err) && val.size() == 1, "one file");

  // nfn's naming, after the dataset ({name}_{split}_{idx:06d}.bin), beside the fineweb_* above.
  std::string n = make_dir("named");
  write_shard(n + "/moby-dick_train_000000.bin", 4, 60);
  write_shard(n + "/moby-dick_val_000000.bin", 5, 25);
  EXPECT(nfn::data::find_shards(n, "train", &train, &err) && train.size() == 1 &&
             train[0].path == n + "/moby-dick_train_000000.bin" && train[0].num_tokens == 60,
         "dataset-named train: %s", err.c_str());
  EXPECT(nfn::data::find_shards(n, "val", &val, &err) && val.size() == 1 && val[0].num_tokens == 25,
         "dataset-named val: %s", err.c_str());
  EXPECT(nfn::data::find_validation_siblings(n + "/moby-dick_train_000000.bin", &val, &err) && val.size() == 1 &&
             val[0].path == n + "/moby-dick_val_000000.bin",
         "dataset-named val sibling: %s", err.c_str());

  // TinyStories naming: <name>_train.bin beside <name>_val.bin, uint32 tokens.
  std::string t = make_dir("tiny");
  write_shard(t + "/TinyStories_train.bin", 2, 70, 4);
  write_shard(t + "/TinyStories_val.bin", 3, 20, 4);
  write_shard(t + "/TinyStories_valley.bin", 3, 20, 4);  // not a validation shard
  EXPECT(nfn::data::find_shards(t, "train", &train, &err) && train.size() == 1 && train[0].token_bytes == 4,
         "tinystories train: %s", err.c_str());
  EXPECT(nfn::data::find_validation_siblings(t + "/TinyStories_train.bin", &val, &err) && val.size() == 1 &&
             val[0].path == t + "/TinyStories_val.bin",
         "tinystories val: %s", err.c_str());
}

static void expect_error(const std::string& path, const std::string& split, const std::string& part) {
  std::vector<TokenShard> out;
  std::string err;
  bool ok = nfn::data::find_shards(path, split, &out, &err);
  EXPECT(!ok, "%s should be rejected", path.c_str());
  EXPECT(contains(err, path + ": ") && contains(err, part), "error for %s: '%s' lacks '%s'", path.c_str(), err.c_str(),
         part.c_str());
}

static void test_bad_input() {
  std::string d = make_dir("bad");
  write_shard(d + "/magic.bin", 0, 10, 2, 12345);
  expect_error(d + "/magic.bin", "train", "bad magic 12345");
  write_shard(d + "/version.bin", 0, 10, 2, 0, 3);
  expect_error(d + "/version.bin", "train", "unsupported version 3");
  write_shard(d + "/version32.bin", 0, 10, 4, 0, 1);
  expect_error(d + "/version32.bin", "train", "unsupported version 1 for magic 20240801");
  write_shard(d + "/short.bin", 0, 10, 2, 0, -1, -4);  // two tokens missing
  expect_error(d + "/short.bin", "train", "truncated: file is 1040 bytes, header says 10 tokens = 1044 bytes");
  write_shard(d + "/long.bin", 0, 10, 2, 0, -1, 2);
  expect_error(d + "/long.bin", "train", "too long");
  FILE* f = std::fopen((d + "/header.bin").c_str(), "wb");
  std::fwrite("abc", 1, 3, f);
  std::fclose(f);
  expect_error(d + "/header.bin", "train", "truncated header: 3 bytes");
  expect_error(d + "/missing.bin", "train", "cannot open");
  std::string empty = make_dir("empty");
  expect_error(empty, "train", "no *_train_*.bin shards found");
  // One bad shard among good ones fails the whole directory, naming the bad file.
  std::string mixed = make_dir("mixed");
  write_shard(mixed + "/a_train_000000.bin", 0, 10);
  write_shard(mixed + "/a_train_000001.bin", 0, 10, 2, 777);
  std::vector<TokenShard> out;
  std::string err;
  EXPECT(!nfn::data::find_shards(mixed, "train", &out, &err) && contains(err, "a_train_000001.bin: bad magic 777"),
         "mixed: %s", err.c_str());
  EXPECT(!nfn::data::find_validation_siblings(mixed + "/a_train_000000.bin", &out, &err) &&
             contains(err, "no validation shard beside it"),
         "no val: %s", err.c_str());
  EXPECT(!nfn::data::find_validation_siblings(mixed + "/shard.bin", &out, &err) && contains(err, "not a *_train*.bin"),
         "bad name: %s", err.c_str());
}

static std::vector<TokenShard> shards_in(const std::string& dir) {
  std::vector<TokenShard> s;
  std::string err;
  if (!nfn::data::find_shards(dir, "train", &s, &err)) std::printf("find: %s\n", err.c_str());
  return s;
}

static void test_sampler_sequence() {
  // B*T = 8: shard 0 (41 tokens) gives 5 batches, shard 1 (5 tokens) is too short, shard 2
  // (17 tokens) gives 2 batches.
  std::string d = make_dir("seq");
  write_shard(d + "/x_train_000000.bin", 0, 41);
  write_shard(d + "/x_train_000001.bin", 1, 5);
  write_shard(d + "/x_train_000002.bin", 2, 17);
  TokenBatchSampler s;
  std::string err;
  EXPECT(s.open(shards_in(d), 2, 4, 0, &err), "open: %s", err.c_str());
  EXPECT(s.batches_per_epoch() == 7, "batches per epoch %lld", (long long)s.batches_per_epoch());
  struct Expected { int salt; int64_t offset; };
  std::vector<Expected> want = {{0, 0}, {0, 8}, {0, 16}, {0, 24}, {0, 32}, {2, 0}, {2, 8}, {0, 0}};
  int32_t in[8], tg[8];
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT(s.next(in, tg, &err), "next %zu: %s", b, err.c_str());
    for (int i = 0; i < 8; ++i) {
      EXPECT(in[i] == (int32_t)token_at(want[b].salt, want[b].offset + i), "batch %zu input %d", b, i);
      EXPECT(tg[i] == (int32_t)token_at(want[b].salt, want[b].offset + i + 1), "batch %zu target %d", b, i);
    }
    const auto& w = s.last_window();
    EXPECT(w.size() == 18, "window bytes %zu", w.size());
    uint16_t last;
    std::memcpy(&last, &w[16], 2);
    EXPECT(last == token_at(want[b].salt, want[b].offset + 8), "last window token");
  }
  EXPECT(s.position().epoch == 1 && s.position().shard == 0 && s.position().offset == 8, "position after 8 batches");
}

static void test_resume_and_seed() {
  std::string d = make_dir("seed");
  for (int i = 0; i < 6; ++i) write_shard(d + "/x_train_00000" + std::to_string(i) + ".bin", i, 30 + i);
  auto shards = shards_in(d);
  TokenBatchSampler a, b, c;
  std::string err;
  EXPECT(a.open(shards, 1, 8, 1234, &err) && b.open(shards, 1, 8, 1234, &err) && c.open(shards, 1, 8, 99, &err),
         "open");
  int32_t in_a[8], tg_a[8], in_b[8], tg_b[8];
  std::vector<int32_t> first_a, first_c;
  TokenBatchSampler::Position saved;
  for (int step = 0; step < 40; ++step) {
    if (step == 17) saved = a.position();
    a.next(in_a, tg_a, &err);
    first_a.push_back(in_a[0]);
    c.next(in_b, tg_b, &err);
    first_c.push_back(in_b[0]);
  }
  EXPECT(first_a != first_c, "different seeds give different orders");
  // The order is a permutation of every shard each epoch (3 or 4 batches per shard here).
  EXPECT(a.batches_per_epoch() == 21, "batches per epoch %lld", (long long)a.batches_per_epoch());
  std::set<int> salts;
  for (int i = 0; i < 21; ++i) salts.insert(first_a[i] / 1000);
  EXPECT(salts.size() == 6, "epoch 0 visits every shard, saw %zu", salts.size());
  // Restore at step 17 in a fresh sampler: the same batches follow.
  EXPECT(b.seek(saved, &err), "seek: %s", err.c_str());
  for (int step = 17; step < 40; ++step) {
    b.next(in_b, tg_b, &err);
    EXPECT(in_b[0] == first_a[step], "resumed step %d", step);
  }
  auto order0 = nfn::data::shard_order(6, 1234, 0), order1 = nfn::data::shard_order(6, 1234, 1);
  EXPECT(order0 != order1, "epochs reshuffle");
  EXPECT(nfn::data::shard_order(4, 0, 3) == (std::vector<int64_t>{0, 1, 2, 3}), "seed 0 is sorted");
  // Bad positions are rejected and leave the sampler where it was.
  TokenBatchSampler::Position before = b.position();
  EXPECT(!b.seek({0, 6, 0}, &err) && contains(err, "out of range"), "shard range: %s", err.c_str());
  EXPECT(!b.seek({0, 0, 1000}, &err) && contains(err, "past the shard"), "offset range: %s", err.c_str());
  EXPECT(!b.seek({-1, 0, 0}, &err), "negative epoch");
  EXPECT(b.position().shard == before.shard && b.position().offset == before.offset, "unchanged after bad seek");
}

static void test_sampler_errors() {
  std::string d = make_dir("samperr");
  write_shard(d + "/x_train_000000.bin", 0, 8);
  TokenBatchSampler s;
  std::string err;
  EXPECT(!s.open(shards_in(d), 2, 4, 0, &err) && contains(err, "no shard holds B*T+1 = 9 tokens"), "%s", err.c_str());
  write_shard(d + "/x_train_000001.bin", 1, 30);
  EXPECT(s.open(shards_in(d), 2, 4, 0, &err), "open: %s", err.c_str());
  s.set_vocab_size(1005);  // shard 1's tokens are 1000.. so the 6th token is out of range
  int32_t in[8], tg[8];
  EXPECT(!s.next(in, tg, &err) && contains(err, "x_train_000001.bin: token id 1005 at token 5 is out of range"),
         "vocab: %s", err.c_str());
  s.set_vocab_size(0);
  // A shard truncated after validation is reported, not read past.
  std::string path = d + "/x_train_000001.bin";
  EXPECT(truncate(path.c_str(), 1024 + 2 * 4) == 0, "truncate");
  EXPECT(!s.next(in, tg, &err) && contains(err, path + ": truncated"), "late truncation: %s", err.c_str());
  // Mixed token widths cannot share one batch buffer.
  std::string m = make_dir("width");
  write_shard(m + "/x_train_000000.bin", 0, 30, 2);
  write_shard(m + "/x_train_000001.bin", 0, 30, 4);
  EXPECT(!s.open(shards_in(m), 1, 4, 0, &err) && contains(err, "32-bit tokens"), "widths: %s", err.c_str());
}

static void test_epoch_counter_end() {
  // Epochs past kMaxEpoch (INT64_MAX / 2) are refused, so the counter never wraps (a seek to
  // the end of epoch INT64_MAX once wrapped to epoch INT64_MIN), and the sampler stays where it
  // was; the last epoch allowed is read as any other.
  std::string d = make_dir("last_epoch");
  write_shard(d + "/x_train_000000.bin", 4, 17);  // B*T = 8: windows at offsets 0 and 8
  TokenBatchSampler s;
  std::string err;
  EXPECT(s.open(shards_in(d), 2, 4, 0, &err) && s.batches_per_epoch() == 2, "open: %s", err.c_str());
  const int64_t last = TokenBatchSampler::kMaxEpoch;
  EXPECT(last == INT64_MAX / 2, "kMaxEpoch %lld", (long long)last);
  auto at = [&](int64_t epoch, int64_t shard, int64_t offset) {
    const TokenBatchSampler::Position p = s.position();
    return p.epoch == epoch && p.shard == shard && p.offset == offset;
  };
  for (int64_t epoch : {last + 1, INT64_MAX}) {
    err.clear();
    EXPECT(!s.seek({epoch, 0, 16}, &err) &&
               err == "data position: epoch " + std::to_string(epoch) + " is past the last one the sampler takes "
                      "(4611686018427387903)",
           "seek past the last epoch: %s", err.c_str());
    EXPECT(at(0, 0, 0), "unchanged after the refused seek");
  }
  EXPECT(s.seek({last, 0, 8}, &err) && at(last, 0, 8), "the last epoch's last batch: %s", err.c_str());
  int32_t in[8], tg[8];
  EXPECT(s.next(in, tg, &err) && in[0] == (int32_t)token_at(4, 8) && tg[7] == (int32_t)token_at(4, 16),
         "read there: %s", err.c_str());
}

static void test_uint32_values() {
  std::string d = make_dir("u32");
  write_shard(d + "/big_train_000000.bin", 50, 20, 4);  // ids 50000.. need no uint16 wrap
  TokenBatchSampler s;
  std::string err;
  EXPECT(s.open(shards_in(d), 1, 16, 0, &err), "open: %s", err.c_str());
  int32_t in[16], tg[16];
  EXPECT(s.next(in, tg, &err), "next: %s", err.c_str());
  EXPECT(in[3] == (int32_t)token_at(50, 3) && tg[15] == (int32_t)token_at(50, 16), "uint32 values");
  EXPECT(s.last_window().size() == 17 * 4, "uint32 window bytes");
}

int main() {
  const char* t = std::getenv("TEST_TMPDIR");
  char tmpl[] = "/tmp/token_shards_testXXXXXX";
  tmp_root = t ? t : mkdtemp(tmpl);
  test_discovery();
  test_bad_input();
  test_sampler_sequence();
  test_resume_and_seed();
  test_sampler_errors();
  test_uint32_values();
  test_epoch_counter_end();
  return nfn_test::finish("token_shards_test");
}
