// Activation recompute (GPTRecompute) changes where the backward finds a layer's activations,
// not what they are. For each mode, every gradient (two micro-batches accumulated, then another
// shape's own activation block), the summed loss and a row's logits are bit for bit those of
// the model that keeps every layer's activations (the model tests/py/train/torch_parity_test.py
// holds against PyTorch): on the CPU op library (f32 and bf16 GEMMs) and on the CUDA library's
// kernels under the emulator (f32 with flash, bf16 with flash_mma). And the activation block
// shrinks by L - 1 layers' copies of each recomputed tensor, counted here from the geometry.
//
// Usage: gpt_recompute_test CPU_OPS_LIB EMULATED_CUDA_OPS_LIB
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cc/model/gpt.h"
#include "cc/ops/op_library.h"
#include "tests/cc/expect.h"

namespace {

constexpr int kB = 2, kT = 64;          // the micro-batch init reserves
constexpr int kB2 = 1, kT2 = 48;        // another shape, in a block of its own
const char* const kModes[] = {"none", "attention", "mlp", "all"};

nfn::GPTConfig geometry() {
  nfn::GPTConfig c;
  // Head size 64: the emulated library's tensor-core attention runs (not its fallback).
  c.max_seq_len = kT, c.vocab_size = 100, c.padded_vocab_size = 128, c.num_layers = 3, c.num_heads = 2,
  c.channels = 128;
  return c;
}

// GPT-2's initialisation, every value then moved a little, so that norms and biases differ
// from layer to layer (a recompute with another layer's weights would not go unseen).
std::vector<float> parameters(const nfn::GPTConfig& c) {
  std::vector<float> p = nfn::GPT::random_parameters(c, 7);
  for (size_t i = 0; i < p.size(); ++i) p[i] += 0.05f * (static_cast<float>((i * 2654435761u) % 1000) / 1000 - 0.5f);
  return p;
}

std::vector<int32_t> tokens(int n, int salt, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7 + salt * 13 + i / 5) % vocab;
  return t;
}

struct Result {
  float loss = NAN;
  std::vector<float> grads, other_shape_grads, logits;
};

// Two micro-batches' gradients accumulated at the reserved shape, then one of another shape's
// (zeroed first), then forward-only logits of a row.
bool train_step(nfn::GPT& m, int B, int T, int batches, std::vector<float>* grads, float* loss, std::string* error) {
  const int V = m.config().vocab_size, N = B * T;
  if (!m.zero_grads(error) || !m.zero_loss(error)) return false;
  for (int k = 0; k < batches; ++k) {
    const std::vector<int32_t> in = tokens(N, 2 * k, V), tg = tokens(N, 2 * k + 1, V);
    if (!m.upload_tokens(in.data(), tg.data(), B, T, error) ||
        !m.step_forward_backward(true, 1.0f / static_cast<float>(batches * N), error))
      return false;
  }
  float sumsq = 0;
  return m.read_scalars(loss, &sumsq, error) && m.get_gradients(grads, error);
}

Result run(const nfn_op_table& ops, nfn_ctx* ctx, nfn_dtype dtype, const char* mode, std::string* error) {
  const nfn::GPTConfig c = geometry();
  nfn::GPTRecompute recompute;
  Result r;
  float unused = 0;
  nfn::GPT m;
  if (!nfn::parse_recompute(mode, &recompute) || !m.init(&ops, ctx, c, dtype, error, kB, kT, recompute) ||
      !m.set_parameters(parameters(c), error) || !train_step(m, kB, kT, 2, &r.grads, &r.loss, error) ||
      !train_step(m, kB2, kT2, 1, &r.other_shape_grads, &unused, error))
    return r;
  const std::vector<int32_t> in = tokens(kB * kT, 9, c.vocab_size);
  if (!m.upload_tokens(in.data(), nullptr, kB, kT, error) || !m.logits_for_row(kT + 5, &r.logits, error))
    r.logits.clear();
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Each mode against "none" on one op library and dtype.
void check_library(const nfn_op_table& ops, const char* what, nfn_dtype dtype,
                   std::vector<std::pair<const char*, const char*>> options) {
  nfn_ctx* ctx = nullptr;
  EXPECT(ops.ctx_create(0, &ctx) == NFN_OK, "%s: ctx_create", what);
  if (ctx == nullptr) return;
  for (const auto& [key, value] : options) {
    const nfn_status s = ops.ctx_configure(ctx, key, value);
    if (s == NFN_ERR_UNSUPPORTED) {  // bf16 GEMMs on a CPU without AVX-512
      std::printf("%s: skipped: %s\n", what, ops.ctx_last_error(ctx));
      ops.ctx_destroy(ctx);
      return;
    }
    EXPECT(s == NFN_OK, "%s: %s=%s: %s", what, key, value, ops.ctx_last_error(ctx));
  }
  std::string error;
  const Result want = run(ops, ctx, dtype, "none", &error);
  EXPECT(error.empty() && !want.logits.empty(), "%s none: %s", what, error.c_str());
  // Every tensor's gradient is there to compare: none is all zero.
  for (const nfn::ParamTensor& t : nfn::param_layout(geometry())) {
    double most = 0;
    for (size_t i = t.offset; i < t.offset + t.count && i < want.grads.size(); ++i)
      most = std::fmax(most, std::fabs(want.grads[i]));
    EXPECT(most > 0, "%s: the gradient of %s is all zero", what, t.name);
  }
  for (const char* mode : kModes) {
    const Result got = run(ops, ctx, dtype, mode, &error);
    EXPECT(error.empty(), "%s %s: %s", what, mode, error.c_str());
    EXPECT(std::memcmp(&got.loss, &want.loss, sizeof(float)) == 0, "%s %s: loss %.9g, want %.9g", what, mode,
           got.loss, want.loss);
    EXPECT(same_bits(got.grads, want.grads), "%s %s: accumulated gradients differ", what, mode);
    EXPECT(same_bits(got.other_shape_grads, want.other_shape_grads), "%s %s: another shape's gradients differ",
           what, mode);
    EXPECT(same_bits(got.logits, want.logits), "%s %s: logits differ", what, mode);
  }
  ops.ctx_destroy(ctx);
}

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// What a mode saves: each recomputed tensor's slot holds one layer where it held L.
void check_memory() {
  const nfn::GPTConfig c = geometry();
  const size_t L = c.num_layers, C = c.channels, NH = c.num_heads, N = static_cast<size_t>(kB) * kT;
  for (nfn_dtype dtype : {NFN_F32, NFN_BF16}) {
    const size_t e = dtype == NFN_F32 ? 4 : 2;
    auto saved = [&](std::vector<size_t> per_layer) {
      size_t bytes = 0;
      for (size_t b : per_layer) bytes += align(L * b) - align(b);
      return bytes;
    };
    // ln1, its mean and rstd, qkv, the attention's output and log-sum-exp, residual2
    const size_t attention = saved({N * C * e, N * 4, N * 4, 3 * N * C * e, N * C * e, N * NH * 4, N * C * e});
    // ln2, its mean and rstd, fc's output before and after GELU
    const size_t mlp = saved({N * C * e, N * 4, N * 4, 4 * N * C * e, 4 * N * C * e});
    const size_t none = nfn::GPT::memory_bytes(c, dtype, kB, kT);
    const std::pair<nfn::GPTRecompute, size_t> cases[] = {
        {{true, false}, attention}, {{false, true}, mlp}, {{true, true}, attention + mlp}};
    for (const auto& [mode, bytes] : cases)
      EXPECT(none - nfn::GPT::memory_bytes(c, dtype, kB, kT, mode) == bytes,
             "dtype %d, attention %d, mlp %d: saves %zu bytes, want %zu", dtype, mode.attention, mode.mlp,
             none - nfn::GPT::memory_bytes(c, dtype, kB, kT, mode), bytes);
    EXPECT(nfn::GPT::memory_bytes(c, dtype, 0, 0, {true, true}) == nfn::GPT::memory_bytes(c, dtype, 0, 0),
           "the model's state is the same in every mode");
  }
  nfn::GPTRecompute r;
  EXPECT(!nfn::parse_recompute("some", &r) && !nfn::parse_recompute("", &r), "unknown mode names are refused");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CPU_OPS_LIB EMULATED_CUDA_OPS_LIB\n", argv[0]);
    return 2;
  }
  check_memory();
  nfn::OpLibrary cpu, emulated;
  std::string error;
  EXPECT(nfn::load_op_library(argv[1], &cpu, &error), "%s", error.c_str());
  EXPECT(nfn::load_op_library(argv[2], &emulated, &error), "%s", error.c_str());
  if (cpu.handle != nullptr) {
    check_library(cpu.ops, "cpu f32", NFN_F32, {{"matmul", "f32"}});
    check_library(cpu.ops, "cpu f32, bf16 GEMMs", NFN_F32, {{"matmul", "bf16"}});
  }
  if (emulated.handle != nullptr) {
    check_library(emulated.ops, "emulated cuda f32", NFN_F32, {{"attention", "flash"}});
    check_library(emulated.ops, "emulated cuda bf16", NFN_BF16, {{"attention", "flash_mma"}});
  }
  return nfn_test::finish("gpt_recompute_test");
}
