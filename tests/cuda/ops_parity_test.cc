// Every op of the CUDA library against the CPU library (the reference) on fresh random
// inputs with no zeros. Outputs start as NaN (or, where the op accumulates, as random
// values), so an unwritten element fails. bf16 cases run the CPU op in f32 on the same
// bf16-rounded inputs. Without a GPU the test says why and skips.
#include <dlfcn.h>

#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/cc/ops/attention_shape.h"
#include "tests/cuda/graph_checks.h"
#include "tests/cuda/parity_harness.h"

using namespace parity;

namespace {

std::mt19937 rng(20240520);
std::vector<std::string> not_run;  // checks the CUDA library refused to run, with its reason

std::vector<int32_t> random_ids(size_t n, int bound, bool some_masked = false) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(rng() % bound);
  if (some_masked)
    for (size_t i = 3; i < n; i += 7) v[i] = -1;
  return v;
}

#define F(i) static_cast<float*>(p[i])
#define P(i) p[i]

// Shapes: 16 bytes a load (C = 72) with a few repeated tokens; one element a load (C = 75)
// with one token in every other position (`frequent` 2), a run of about 50 rows in dwte's
// sorted order, which crosses an aligned block of 32 sorted positions (the CUDA backward's
// segments); and 16 bytes a load with one token in 3 of every 4 positions (`frequent` 4) of
// 2 x 100, a run of about 150 rows that spans whole blocks.
void check_embedding(const Backend& cpu, const Backend& gpu, nfn_dtype dt, int B, int T, int C, int frequent) {
  const int V = 50;
  const std::string dims = " " + std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C);
  auto tokens = random_ids(B * T, V);
  tokens[5] = tokens[6] = tokens[40] = 7;  // repeated tokens must sum, not overwrite
  for (size_t i = 0; frequent > 0 && i < tokens.size(); ++i)
    if (i % frequent != 1) tokens[i] = 7;
  for (bool with_wpe : {true, false}) {
    compare(cpu, gpu, Case{(with_wpe ? "embedding_forward" : "embedding_forward (no wpe)") + dims,
                           {output("out", B * T * C), ids("tokens", tokens),
                            input("wte", random_floats(V * C, rng)),
                            input("wpe", with_wpe ? random_floats(T * C, rng) : std::vector<float>{})},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().embedding_forward(b.ctx, P(0), static_cast<int32_t*>(p[1]),
                                                              P(2), P(3), B, T, C, d);
                           }},
            dt);
  }
  compare(cpu, gpu, Case{"embedding_backward" + dims,
                         {accumulated("dwte", random_floats(V * C, rng)),
                          accumulated("dwpe", random_floats(T * C, rng)),
                          input("dout", random_floats(B * T * C, rng)), ids("tokens", tokens)},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().embedding_backward(b.ctx, P(0), P(1), P(2),
                                                             static_cast<int32_t*>(p[3]), B, T, C, d);
                         }},
          dt);
}

// Under the emulator, its nfn_emu_shared_optin(bytes): emulate a device whose blocks may opt
// in to that much shared memory (0: back to sm_90's). NULL on a real GPU.
using SharedOptIn = void (*)(int);
SharedOptIn emulated_shared_optin(const Backend& gpu) {
  return gpu.name() == "cuda" ? reinterpret_cast<SharedOptIn>(dlsym(gpu.lib.handle, "nfn_emu_shared_optin"))
                              : nullptr;
}

void check_norms(const Backend& cpu, const Backend& gpu, nfn_dtype dt, int N, int C) {
  const std::string dims = " " + std::to_string(N) + "x" + std::to_string(C);
  const auto inp = random_floats(N * C, rng), w = random_floats(C, rng), bias = random_floats(C, rng);
  compare(cpu, gpu, Case{"layernorm_forward" + dims,
                         {output("out", N * C), output("mean", N, Kind::f32), output("rstd", N, Kind::f32),
                          input("inp", inp), input("weight", w), input("bias", bias)},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().layernorm_forward(b.ctx, P(0), F(1), F(2), P(3), P(4), P(5), N, C, d);
                         }},
          dt);
  // The saved statistics come from the inputs as the backward will see them.
  std::vector<float> mean(N), rstd(N), rms_rstd(N);
  for (int r = 0; r < N; ++r) {
    double s = 0, ss = 0, sq = 0;
    for (int c = 0; c < C; ++c) {
      const double x = dt == NFN_BF16 ? round_bf16(inp[r * C + c]) : inp[r * C + c];
      s += x;
      sq += x * x;
    }
    for (int c = 0; c < C; ++c) {
      const double x = dt == NFN_BF16 ? round_bf16(inp[r * C + c]) : inp[r * C + c];
      ss += (x - s / C) * (x - s / C);
    }
    mean[r] = static_cast<float>(s / C);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(ss / C + 1e-5));
    rms_rstd[r] = static_cast<float>(1.0 / std::sqrt(sq / C + 1e-5));
  }
  for (bool colsum : {true, false})  // dinp_colsum: the column sums of the dinp it leaves
    compare(cpu, gpu, Case{"layernorm_backward" + dims + (colsum ? " dinp_colsum" : ""),
                           {accumulated("dinp", random_floats(N * C, rng)),
                            accumulated("dweight", random_floats(C, rng)), accumulated("dbias", random_floats(C, rng)),
                            colsum ? accumulated("dinp_colsum", random_floats(C, rng)) : input("dinp_colsum", {}),
                            input("dout", random_floats(N * C, rng)), input("inp", inp), input("weight", w),
                            input("mean", mean, Kind::f32), input("rstd", rstd, Kind::f32)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().layernorm_backward(b.ctx, P(0), P(1), P(2), P(3), P(4), P(5), P(6), F(7),
                                                               F(8), N, C, d);
                           }},
            dt);
  for (bool with_weight : {true, false}) {
    const std::string tag = dims + (with_weight ? "" : " (no weight)");
    compare(cpu, gpu, Case{"rmsnorm_forward" + tag,
                           {output("out", N * C), output("rstd", N, Kind::f32), input("inp", inp),
                            input("weight", with_weight ? w : std::vector<float>{})},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().rmsnorm_forward(b.ctx, P(0), F(1), P(2), P(3), N, C, 1e-5f, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"rmsnorm_backward" + tag,
                           {accumulated("dinp", random_floats(N * C, rng)),
                            with_weight ? accumulated("dweight", random_floats(C, rng)) : input("dweight", {}),
                            input("dout", random_floats(N * C, rng)), input("inp", inp),
                            input("weight", with_weight ? w : std::vector<float>{}),
                            input("rstd", rms_rstd, Kind::f32)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().rmsnorm_backward(b.ctx, P(0), P(1), P(2), P(3), P(4), F(5), N, C, d);
                           }},
            dt);
  }
  // llama's smaller eps on rows whose mean square (about 8e-7) is of its order: a library that
  // kept 1e-5 would be far outside the bound.
  auto small = inp;
  for (float& v : small) v *= 1e-3f;
  compare(cpu, gpu, Case{"rmsnorm_forward eps 1e-6" + dims,
                         {output("out", N * C), output("rstd", N, Kind::f32), input("inp", small), input("weight", w)},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().rmsnorm_forward(b.ctx, P(0), F(1), P(2), P(3), N, C, 1e-6f, d);
                         }},
          dt);
}

void check_embedding(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_embedding(cpu, gpu, dt, 3, 37, 72, 0);
  check_embedding(cpu, gpu, dt, 2, 50, 75, 2);
  check_embedding(cpu, gpu, dt, 2, 100, 72, 4);
}

// Shapes: 16 bytes a load (C a whole number of 16-byte packs), one element a load (C = 75),
// warps with several rows each in the backward (N = 4200 over its 512 blocks of 8 warps), and
// a LayerNorm row too wide for 48 KiB of column sums (C = 6200: one warp a block, opted in).
void check_norms(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  struct Shape { int N, C; };
  // bf16 rows of up to 1,024 in 16-byte packs are held in registers, 1 to 4 packs a lane
  // (200 and 24: 1; 392: 2; 520 and GPT-2's 768: 3; 1,024: 4); 75 and 6,200 stream.
  for (Shape s : {Shape{150, 200}, Shape{37, 75}, Shape{4200, 24}, Shape{3, 6200}, Shape{33, 392}, Shape{9, 520},
                  Shape{130, 768}, Shape{45, 1024}})
    check_norms(cpu, gpu, dt, s.N, s.C);
  // Under the emulator, again on a device like sm_120 (100 KiB of shared memory an SM): the
  // backward's 48 KiB blocks then fit 2 an SM, not the 4 planned, and its grid (and so its
  // partials) shrinks to one wave of them. N = 40000 fills the grid at 8 rows a block.
  const auto optin = emulated_shared_optin(gpu);
  if (optin != nullptr) {
    optin(99 * 1024);
    for (Shape s : {Shape{40000, 768}, Shape{3, 6200}})
      check_norms(cpu, gpu, dt, s.N, s.C);
    // A row whose weight and bias column sums no longer fit a block's 99 KiB (C = 13,000:
    // 104,000 bytes a warp) is refused with the reason, before anything is read.
    const std::vector<float> few(16, 1.f);
    void* any = gpu.upload(few.data(), sizeof(float) * few.size());
    const nfn_status refused = gpu.ops().layernorm_backward(gpu.ctx, any, any, any, nullptr, any, any, any,
                                                            static_cast<float*>(any), static_cast<float*>(any), 3,
                                                            13000, dt);
    const std::string why = gpu.ops().ctx_last_error(gpu.ctx);
    expect(refused == NFN_ERR_UNSUPPORTED && why.find("104000 bytes of shared memory") != std::string::npos,
           "layernorm_backward C=13000 on 99 KiB: status " + std::to_string(refused) + " '" + why + "'");
    gpu.ok(gpu.ops().free(gpu.ctx, any), "free");
    optin(0);
  }
}

void check_linear(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  struct Shape { int N, IC, OC; };
  // IC 20: cuBLASLt's DGELU needs IC divisible by 8, so gelu_pre takes the unfused path there
  // (as OC 75 does for linear_forward's GELU).
  for (Shape s : {Shape{154, 96, 200}, Shape{33, 40, 75}, Shape{9, 20, 16}}) {
    const int N = s.N, IC = s.IC, OC = s.OC;
    const std::string dims = " " + std::to_string(N) + "x" + std::to_string(IC) + "x" + std::to_string(OC);
    const auto inp = random_floats(N * IC, rng, 0.5f), w = random_floats(OC * IC, rng, 0.2f);
    const auto bias = random_floats(OC, rng);
    for (bool with_bias : {true, false}) {
      compare(cpu, gpu, Case{std::string("linear_forward") + (with_bias ? " bias" : "") + dims,
                             {output("out", N * OC), input("inp", inp), input("weight", w),
                              input("bias", with_bias ? bias : std::vector<float>{})},
                             [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                               return b.ops().linear_forward(b.ctx, P(0), nullptr, P(1), P(2), P(3), nullptr, N, IC,
                                                             OC, NFN_EPILOGUE_NONE, d);
                             }},
              dt);
    }
    // Onto a residual stream: into another buffer, and in place (out is the residual).
    compare(cpu, gpu, Case{"linear_forward residual" + dims,
                           {output("out", N * OC), input("inp", inp), input("weight", w), input("bias", bias),
                            input("residual", random_floats(N * OC, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().linear_forward(b.ctx, P(0), nullptr, P(1), P(2), P(3), P(4), N, IC, OC,
                                                           NFN_EPILOGUE_NONE, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"linear_forward residual in place" + dims,
                           {accumulated("out", random_floats(N * OC, rng)), input("inp", inp), input("weight", w),
                            input("bias", bias)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().linear_forward(b.ctx, P(0), nullptr, P(1), P(2), P(3), P(0), N, IC, OC,
                                                           NFN_EPILOGUE_NONE, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"linear_forward gelu" + dims,
                           {output("out", N * OC), output("aux", N * OC), input("inp", inp), input("weight", w),
                            input("bias", bias)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().linear_forward(b.ctx, P(0), P(1), P(2), P(3), P(4), nullptr, N, IC, OC,
                                                           NFN_EPILOGUE_GELU, d);
                           }},
            dt);
    // accumulate_dinp with dinp_colsum: the column sums of dinp as it is left.
    for (int acc : {0, 1}) {
      compare(cpu, gpu, Case{std::string("linear_backward") + (acc ? " accumulate dinp_colsum" : "") + dims,
                             {acc ? accumulated("dinp", random_floats(N * IC, rng)) : output("dinp", N * IC),
                              accumulated("dweight", random_floats(OC * IC, rng)),
                              accumulated("dbias", random_floats(OC, rng)),
                              acc ? accumulated("dinp_colsum", random_floats(IC, rng)) : input("dinp_colsum", {}),
                              input("dout", random_floats(N * OC, rng, 0.5f)), input("inp", inp), input("weight", w)},
                             [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                               return b.ops().linear_backward(b.ctx, P(0), P(1), P(2), P(3), P(4), P(5), P(6),
                                                              nullptr, N, IC, OC, acc, d);
                             }},
              dt);
    }
    // Through a GELU on the input (fcproj's): dinp with respect to the pre-activation, and its
    // column sums (fc's bias gradient).
    compare(cpu, gpu, Case{"linear_backward gelu_pre dinp_colsum" + dims,
                           {output("dinp", N * IC), accumulated("dweight", random_floats(OC * IC, rng)),
                            accumulated("dbias", random_floats(OC, rng)),
                            accumulated("dinp_colsum", random_floats(IC, rng)),
                            input("dout", random_floats(N * OC, rng, 0.5f)), input("inp", inp), input("weight", w),
                            input("gelu_pre", random_floats(N * IC, rng, 2.f))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().linear_backward(b.ctx, P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), N,
                                                            IC, OC, 0, d);
                           }},
            dt);
  }
}

void check_elementwise(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  const size_t n = 70001;
  const auto x = random_floats(n, rng, 2.f);
  compare(cpu, gpu, Case{"gelu_forward", {output("out", n), input("inp", x)},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().gelu_forward(b.ctx, P(0), P(1), n, d);
                         }},
          dt);
  compare(cpu, gpu, Case{"gelu_backward", {output("dinp", n), input("pre", x), input("dout", random_floats(n, rng))},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().gelu_backward(b.ctx, P(0), P(1), P(2), n, d);
                         }},
          dt);
  const int N = 130, C = 96;
  for (bool with_bias : {true, false}) {
    compare(cpu, gpu, Case{with_bias ? "residual_forward" : "residual_forward (no bias)",
                           {output("out", N * C), input("residual", random_floats(N * C, rng)),
                            input("inp", random_floats(N * C, rng)),
                            input("bias", with_bias ? random_floats(C, rng) : std::vector<float>{})},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().residual_forward(b.ctx, P(0), P(1), P(2), P(3), N, C, d);
                           }},
            dt);
  }
}

// ReLU², SwiGLU and soft-capping: n and H a whole number of 16-byte packs (the packed
// kernels), then not (an element a load); SwiGLU's backward also in place over its input.
void check_decoder_activations(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  for (size_t n : {size_t{70000}, size_t{70001}}) {
    const std::string tag = " n" + std::to_string(n);
    const auto x = random_floats(n, rng, 30.f);  // past nanochat's cap of 15, where it saturates
    const float cap = 15.f;
    compare(cpu, gpu, Case{"relu_squared_forward" + tag, {output("out", n), input("inp", x)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().relu_squared_forward(b.ctx, P(0), P(1), n, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"relu_squared_backward" + tag,
                           {output("dinp", n), input("pre", x), input("dout", random_floats(n, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().relu_squared_backward(b.ctx, P(0), P(1), P(2), n, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"softcap_forward" + tag, {output("out", n), input("inp", x)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().softcap_forward(b.ctx, P(0), P(1), n, cap, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"softcap_backward" + tag,
                           {output("dinp", n), input("pre", x), input("dout", random_floats(n, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().softcap_backward(b.ctx, P(0), P(1), P(2), n, cap, d);
                           }},
            dt);
  }
  const int N = 130;
  for (int H : {96, 45}) {
    const std::string tag = " H" + std::to_string(H);
    const auto gate_up = random_floats(N * 2 * H, rng, 3.f);
    compare(cpu, gpu, Case{"swiglu_forward" + tag, {output("out", N * H), input("inp", gate_up)},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().swiglu_forward(b.ctx, P(0), P(1), N, H, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"swiglu_backward" + tag,
                           {output("dinp", N * 2 * H), input("inp", gate_up),
                            input("dout", random_floats(N * H, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().swiglu_backward(b.ctx, P(0), P(1), P(2), N, H, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"swiglu_backward in place" + tag,
                           {accumulated("inp", gate_up), input("dout", random_floats(N * H, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().swiglu_backward(b.ctx, P(0), P(0), P(1), N, H, d);
                           }},
            dt);
  }
}

// Rotary embeddings on fused qkv rows (NH q, NKV k and NKV v heads, then `pad` channels), in
// both conventions: sign 1 forward out of place (out starts random: its v and padding must
// keep those values) and backward in place, sign -1 the other way round.
void check_rope(const Backend& cpu, const Backend& gpu, nfn_dtype dt, int B, int T, int pos, int NH, int NKV, int HD,
                int pad, float theta) {
  const int N = B * T, stride = (NH + 2 * NKV) * HD + pad;
  const size_t n = static_cast<size_t>(N) * stride;
  const std::string dims = " T" + std::to_string(T) + " pos" + std::to_string(pos) + " NH" + std::to_string(NH) +
                           " NKV" + std::to_string(NKV) + " HD" + std::to_string(HD) + " stride" +
                           std::to_string(stride);
  for (int sign : {1, -1}) {
    const std::string tag = dims + (sign == 1 ? " hf" : " nanochat");
    auto rope = [=](bool forward, bool in_place) {
      return [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
        void* src = in_place ? P(0) : P(1);
        return forward ? b.ops().rope_forward(b.ctx, P(0), src, N, T, pos, stride, NH, NKV, HD, theta, sign, d)
                       : b.ops().rope_backward(b.ctx, P(0), src, N, T, pos, stride, NH, NKV, HD, theta, sign, d);
      };
    };
    const bool forward_in_place = sign == -1;
    compare(cpu, gpu, Case{"rope_forward" + tag + (forward_in_place ? " in place" : ""),
                           forward_in_place ? std::vector<Tensor>{accumulated("qkv", random_floats(n, rng))}
                                            : std::vector<Tensor>{accumulated("out", random_floats(n, rng)),
                                                                  input("qkv", random_floats(n, rng))},
                           rope(true, forward_in_place)},
            dt);
    compare(cpu, gpu, Case{"rope_backward" + tag + (forward_in_place ? "" : " in place"),
                           forward_in_place ? std::vector<Tensor>{accumulated("dqkv", random_floats(n, rng)),
                                                                  input("dout", random_floats(n, rng))}
                                            : std::vector<Tensor>{accumulated("dqkv", random_floats(n, rng))},
                           rope(false, !forward_in_place)},
            dt);
  }
}

// Grouped-query rows in 16-byte packs with llama's theta; a head of 18 (element loads) with
// nanochat's; a decode step (T 1, 3 rows) at a KV-cache offset; positions just below 2^24
// (angles of 1.7e7 rad). Below 65536 (row, pack) items the CUDA kernel splits the heads into
// groups over the grid, as these cases do; 65536 rows of one 2-channel q and k head keep
// every head in one group, as training's many rows do.
void check_rope(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_rope(cpu, gpu, dt, 2, 33, 5, 4, 2, 64, 8, 10000.f);
  check_rope(cpu, gpu, dt, 2, 7, 0, 3, 1, 18, 1, 100000.f);
  check_rope(cpu, gpu, dt, 3, 1, 1000, 8, 2, 128, 0, 500000.f);
  check_rope(cpu, gpu, dt, 1, 16, (1 << 24) - 16, 2, 2, 32, 0, 10000.f);
  check_rope(cpu, gpu, dt, 64, 1024, 0, 1, 1, 2, 0, 10000.f);
}

// Element k of a tensor of the op's dtype that starts at p.
void* element(void* p, size_t k, nfn_dtype d) { return static_cast<char*>(p) + k * (d == NFN_BF16 ? 2 : 4); }

// `v` with the signs of `like` (flip: the opposite signs), so that sum(v * like) does not
// cancel: a scalar gradient summed from many terms is held to a relative bound only then.
std::vector<float> signs_of(std::vector<float> v, const std::vector<float>& like, bool flip = false) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::copysign(v[i], flip ? -like[i] : like[i]);
  return v;
}

// scaled_sum at n a whole number of 16-byte packs and not: nanochat's r x + l x0 (out of
// place), its backout x - lam x_mid (over x, no a), then the backward with every gradient, with
// dx over dout, and with the two sums alone.
void check_scaled_sum(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  for (size_t n : {size_t{70000}, size_t{70001}}) {
    const std::string tag = " n" + std::to_string(n);
    const auto dout = random_floats(n, rng);
    const auto x = signs_of(random_floats(n, rng), dout), y = signs_of(random_floats(n, rng), dout, true);
    const std::vector<float> a = {0.8f}, b = {-1.3f}, da = {0.25f}, db = {-0.75f};
    compare(cpu, gpu, Case{"scaled_sum_forward r x + l x0" + tag,
                           {output("out", n), input("x", x), input("y", y), input("a", a), input("b", b)},
                           [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                             return be.ops().scaled_sum_forward(be.ctx, P(0), P(1), P(2), P(3), P(4), 1.f, 1.f, n, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"scaled_sum_forward backout, out over x" + tag,
                           {accumulated("x", x), input("y", y), input("b", b)},
                           [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                             return be.ops().scaled_sum_forward(be.ctx, P(0), P(0), P(1), nullptr, P(2), 1.f, -1.f, n,
                                                                d);
                           }},
            dt);
    compare(cpu, gpu, Case{"scaled_sum_backward" + tag,
                           {output("dx", n), accumulated("dy", random_floats(n, rng)), accumulated("da", da),
                            accumulated("db", db), input("dout", dout), input("x", x), input("y", y), input("a", a),
                            input("b", b)},
                           [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                             return be.ops().scaled_sum_backward(be.ctx, P(0), P(1), P(2), P(3), P(4), P(5), P(6),
                                                                 P(7), P(8), 0.5f, 2.f, n, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"scaled_sum_backward backout, dx over dout" + tag,
                           {accumulated("dout", dout), accumulated("dy", random_floats(n, rng)), accumulated("db", db),
                            input("y", y), input("b", b)},
                           [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                             return be.ops().scaled_sum_backward(be.ctx, P(0), P(1), nullptr, P(2), P(0), nullptr,
                                                                 P(3), nullptr, P(4), 1.f, -1.f, n, d);
                           }},
            dt);
    compare(cpu, gpu, Case{"scaled_sum_backward da, db alone" + tag,
                           {accumulated("da", da), accumulated("db", db), input("dout", dout), input("x", x),
                            input("y", y)},
                           [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                             return be.ops().scaled_sum_backward(be.ctx, nullptr, nullptr, P(0), P(1), P(2), P(3),
                                                                 P(4), nullptr, nullptr, 1.f, 1.f, n, d);
                           }},
            dt);
  }
}

// One gated_add layout (nfn_ops.def): B sequences of T rows; out starts out_offset elements
// into rows of out_stride (qkv's v part); `shared`: gin and add are one tensor (the smear), so
// the backward's dgin and dadd are one tensor too.
struct GatedLayout {
  std::string name;
  int B, T, H, D, G, shift, out_stride, out_offset, gin_stride, add_stride;
  bool shared, has_lam;
  float scale;
};

void check_gated_add(const Backend& cpu, const Backend& gpu, nfn_dtype dt, const GatedLayout& L) {
  const int N = L.B * L.T;
  const size_t out_n = static_cast<size_t>(N) * L.out_stride, gin_n = static_cast<size_t>(N) * L.gin_stride;
  const size_t add_n = L.shared ? 0 : static_cast<size_t>(N) * L.add_stride, w_n = static_cast<size_t>(L.H) * L.G;
  const auto gin = random_floats(gin_n, rng), add = random_floats(add_n, rng), w = random_floats(w_n, rng, 0.3f);
  const std::vector<float> lam = L.has_lam ? std::vector<float>{0.9f} : std::vector<float>{};
  // The forward's out starts as a copy of gin in the smear, random otherwise.
  const auto out = L.shared ? gin : random_floats(out_n, rng);
  compare(cpu, gpu, Case{"gated_add_forward " + L.name,
                         {accumulated("out", out), input("gin", gin), input("w", w), input("lam", lam),
                          input("add", add)},
                         [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                           return be.ops().gated_add_forward(be.ctx, element(P(0), L.out_offset, d), P(1), P(2),
                                                             L.has_lam ? P(3) : nullptr, L.shared ? P(1) : P(4), N, L.T,
                                                             L.H, L.D, L.G, L.shift, L.out_stride, L.gin_stride,
                                                             L.add_stride, L.scale, d);
                         }},
          dt);
  // dout takes the signs of the add elements it meets, so every head's S, and dlam's sum of
  // them, is positive (signs_of). dlam is asked for without a lambda too (its gradient at
  // L = 1); dadd is dgin in the smear.
  auto dout = random_floats(out_n, rng);
  const std::vector<float>& add_rows = L.shared ? gin : add;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < L.H * L.D && n % L.T >= L.shift; ++c) {
      float& g = dout[static_cast<size_t>(n) * L.out_stride + L.out_offset + c];
      g = std::copysign(g, add_rows[static_cast<size_t>(n - L.shift) * L.add_stride + c]);
    }
  std::vector<Tensor> grads = {accumulated(L.shared ? "dgin = dadd" : "dgin", random_floats(gin_n, rng)),
                               accumulated("dw", random_floats(w_n, rng)), accumulated("dlam", {0.5f}),
                               input("dout", dout), input("gin", gin), input("w", w),
                               input("lam", lam), input("add", add)};
  if (!L.shared) grads.push_back(accumulated("dadd", random_floats(add_n, rng)));
  compare(cpu, gpu, Case{"gated_add_backward " + L.name, grads,
                         [=](const Backend& be, const std::vector<void*>& p, nfn_dtype d) {
                           return be.ops().gated_add_backward(be.ctx, P(0), P(1), P(2), L.shared ? P(0) : P(8),
                                                              element(P(3), L.out_offset, d), P(4), P(5),
                                                              L.has_lam ? P(6) : nullptr, L.shared ? P(4) : P(7), N,
                                                              L.T, L.H, L.D, L.G, L.shift, L.out_stride,
                                                              L.gin_stride, L.add_stride, L.scale, d);
                         }},
          dt);
}

// nanochat's value embeddings (4 kv heads of 64 into the v part of qkv rows of 8 q heads,
// 16-byte packs, scale 3, no lambda) and its smear (one head of 96, gin and add the same rows,
// shift 1 over 3 sequences, a lambda); then heads of 15 at odd strides (an element a load)
// with a gate of 40 channels (wider than a warp), a lambda and shift 1.
void check_gated_add(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_gated_add(cpu, gpu, dt, {"value embedding", 4, 64, 4, 64, 12, 0, 1024, 768, 512, 256, false, false, 3.f});
  check_gated_add(cpu, gpu, dt, {"smear", 3, 50, 1, 96, 24, 1, 96, 0, 96, 96, true, true, 1.f});
  check_gated_add(cpu, gpu, dt, {"heads of 15, G 40", 3, 7, 2, 15, 40, 1, 33, 1, 41, 31, false, true, 0.7f});
}

// QK-norm (head_rmsnorm) on N rows of H heads of D channels, `pad` more channels a row after
// them: the forward out of place (out starts random: the rest of each row must keep those
// values) and in place, the backward out of place and in place over dout. `magnitude` scales
// the input: at 1e-3 its mean square (about 8e-7) is of eps's order, so eps shows.
void check_head_norm(const Backend& cpu, const Backend& gpu, nfn_dtype dt, int N, int H, int D, int pad,
                     float magnitude) {
  const int stride = H * D + pad;
  const size_t n = static_cast<size_t>(N) * stride;
  const float scale = 1.2f, eps = 1e-6f;
  const std::string dims = " N" + std::to_string(N) + " H" + std::to_string(H) + " D" + std::to_string(D) +
                           " stride" + std::to_string(stride) + (magnitude != 1.f ? " (small rows)" : "");
  auto inp = random_floats(n, rng);
  for (float& v : inp) v *= magnitude;
  auto forward = [=](bool in_place) {
    return [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
      return b.ops().head_rmsnorm_forward(b.ctx, P(0), F(1), in_place ? P(0) : P(2), N, H, D, stride, scale, eps, d);
    };
  };
  compare(cpu, gpu, Case{"head_rmsnorm_forward" + dims,
                         {accumulated("out", random_floats(n, rng)), output("rstd", N * H, Kind::f32),
                          input("inp", inp)},
                         forward(false)},
          dt);
  compare(cpu, gpu, Case{"head_rmsnorm_forward in place" + dims,
                         {accumulated("qkv", inp), output("rstd", N * H, Kind::f32)}, forward(true)},
          dt);
  auto rstd = random_floats(N * H, rng);
  for (float& r : rstd) r = std::fabs(r) * 2.f;
  auto backward = [=](bool in_place) {
    return [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
      return b.ops().head_rmsnorm_backward(b.ctx, P(0), in_place ? P(0) : P(3), P(1), F(2), N, H, D, stride, scale,
                                           d);
    };
  };
  compare(cpu, gpu, Case{"head_rmsnorm_backward" + dims,
                         {accumulated("dinp", random_floats(n, rng)), input("out", random_floats(n, rng)),
                          input("rstd", rstd, Kind::f32), input("dout", random_floats(n, rng))},
                         backward(false)},
          dt);
  compare(cpu, gpu, Case{"head_rmsnorm_backward in place" + dims,
                         {accumulated("dout", random_floats(n, rng)), input("out", random_floats(n, rng)),
                          input("rstd", rstd, Kind::f32)},
                         backward(true)},
          dt);
}

// nanochat's layout (4 q and 2 k heads of 64 before 2 v heads, 16-byte loads); heads of 128
// (bf16: 16 lanes a head, f32: 32); of 18 with an odd stride (an element a load, 32 lanes),
// small rows; of 40 (bf16: 5 packs on 8 lanes); and of 4 on many rows (f32: a lane a head).
void check_head_norm(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_head_norm(cpu, gpu, dt, 66, 6, 64, 2 * 64, 1.f);
  check_head_norm(cpu, gpu, dt, 40, 3, 128, 2 * 128, 1.f);
  check_head_norm(cpu, gpu, dt, 21, 4, 18, 2 * 18 + 1, 1e-3f);
  check_head_norm(cpu, gpu, dt, 50, 3, 40, 0, 1.f);
  check_head_norm(cpu, gpu, dt, 600, 2, 4, 4, 1.f);
}

using Attn = nfn_test::AttentionShape;

// GPT-2's multi-head attention: C channels in NH heads, no window.
Attn mha(int B, int T, int C, int NH) { return {B, T, NH, NH, C / NH, 0}; }

// Forward, then backward on the CPU forward's out and lse. `path` is the CUDA backend's
// attention option for these calls ("flash", "flash_mma", "cudnn" or "thunderkittens"); the
// CPU ignores it.
// misaligned: the backward's dout and out start one element past 16-byte alignment (the
// delta kernel then loads an element at a time, and tensor-core paths fall back to flash_simt).
// atomic_dq: the backward may add dQ in any order (cuDNN with deterministic=off), so only dK
// and dV are held to the same bits when it runs again.
void check_attention_shape(const Backend& cpu, const Backend& gpu, nfn_dtype dt, Attn g, const std::string& path,
                           const std::string& note = "", bool misaligned = false, bool atomic_dq = false) {
  const int B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HD = g.HD, W = g.W;
  const std::string dims = g.name() + (path == "flash" ? "" : " attention=" + path) + note;
  auto setup = [path](const Backend& b) {
    if (b.name() != "cuda") return NFN_OK;
    return b.ops().ctx_configure(b.ctx, "attention", path.c_str());
  };
  auto qkv = random_floats(g.qkv(), rng);
  if (dt == NFN_BF16)
    for (float& v : qkv) v = round_bf16(v);
  auto forward = [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
    return b.ops().attention_forward(b.ctx, P(0), F(1), P(2), B, T, NH, NKV, HD, W, d);
  };
  const std::vector<Tensor> forward_tensors = {output("out", g.out()), output("lse", g.lse(), Kind::f32),
                                               input("qkv", qkv)};
  compare(cpu, gpu, Case{"attention_forward" + dims, forward_tensors, forward, setup}, dt);
  // The backward's saved out and lse come from the CPU forward on the same qkv.
  auto saved = run(cpu, Case{"attention_forward (for the backward)", forward_tensors, forward}, NFN_F32);
  if (saved.size() != 2) return;
  if (dt == NFN_BF16)
    for (float& v : saved[0]) v = round_bf16(v);
  auto dout = random_floats(g.out(), rng);
  if (misaligned) {  // one element ahead of each
    dout.insert(dout.begin(), 1.f);
    saved[0].insert(saved[0].begin(), 1.f);
  }
  const size_t row = g.row(), q_width = static_cast<size_t>(NH) * HD;
  compare(cpu, gpu, Case{"attention_backward" + dims,
                         {output("dqkv", g.qkv()), input("dout", dout),
                          input("qkv", qkv), input("out", saved[0]), input("lse", saved[1], Kind::f32)},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           const size_t skip = misaligned ? (d == NFN_BF16 ? 2 : 4) : 0;
                           return b.ops().attention_backward(b.ctx, P(0), static_cast<char*>(P(1)) + skip, P(2),
                                                             static_cast<char*>(P(3)) + skip, F(4), B, T, NH, NKV, HD,
                                                             W, d);
                         },
                         setup,
                         [=](const std::string& tensor, size_t i) {  // dQ: the q heads of each row
                           return atomic_dq && tensor == "dqkv" && i % row < q_width;
                         }},
          dt);
}

// Grouped-query heads (two, three and four query heads a kv head, and one kv head for all) and
// sliding windows (1, inside a tile, across tiles, a tile exactly, T and past it) on head sizes
// hd in 16s, which the tensor-core path takes as well as flash_simt.
const std::vector<Attn> kGroupedShapes = {
    {2, 77, 4, 2, 64, 0},  {1, 130, 4, 1, 32, 0},  {1, 70, 6, 2, 16, 0}, {2, 77, 4, 2, 32, 1},
    {1, 200, 4, 1, 64, 3}, {1, 200, 6, 3, 16, 70}, {2, 150, 2, 2, 32, 64}, {1, 200, 2, 1, 64, 130},
    {1, 130, 4, 2, 128, 40}, {1, 60, 4, 2, 16, 60}, {1, 50, 4, 1, 16, 500}};

// attention=flash_mma, cudnn and thunderkittens: tensor cores for bf16 with head sizes in 16s
// up to 128 (cudnn: in 8s; thunderkittens: 64 and 128 only) (T past one or more 64-row
// tiles, and not a multiple of 64, which thunderkittens leaves to flash_simt); f32 and other
// head sizes fall back to flash_simt; grouped-query heads and windows run flash_mma under all
// three. cudnn is checked where the library can load cuDNN (on a GPU machine with
// libcudnn.so.9), thunderkittens where it was built with a ThunderKittens tree and runs on
// sm_90; elsewhere the summary says why they were not.
void check_attention_path(const Backend& cpu, const Backend& gpu, nfn_dtype dt, const std::string& path) {
  struct Shape { int B, T, C, NH; };
  if (path != "flash_mma" && gpu.name() == "cuda" &&
      gpu.ops().ctx_configure(gpu.ctx, "attention", path.c_str()) != NFN_OK) {
    if (dt == NFN_F32) not_run.push_back(std::string(gpu.ops().ctx_last_error(gpu.ctx)));
    return;
  }
  if (dt == NFN_BF16) {
    for (Shape s : {Shape{2, 77, 256, 4}, Shape{1, 200, 256, 2}, Shape{2, 130, 128, 2}, Shape{1, 64, 128, 1},
                    Shape{1, 1024, 64, 1}})
      check_attention_shape(cpu, gpu, dt, mha(s.B, s.T, s.C, s.NH), path);
    check_attention_shape(cpu, gpu, dt, mha(2, 1, 128, 2), path);  // one position (cudnn: fallback)
    // hd 16 (one tile, then three), 32, 48, 80 (GPT-3 2.7B's), 96 (GPT-3 Large's) and 112:
    // flash_mma's and cuDNN's own, thunderkittens' fallback (flash_simt); hd 40: cuDNN's (in
    // 8s), else flash_simt; hd 36: flash_simt on every path (never flash_mma's kernels of a
    // wider head)
    for (Shape s : {Shape{2, 20, 64, 4}, Shape{1, 130, 32, 2}, Shape{2, 77, 64, 2}, Shape{2, 70, 96, 2},
                    Shape{1, 70, 160, 2}, Shape{1, 70, 192, 2}, Shape{1, 130, 224, 2}, Shape{1, 70, 72, 2},
                    Shape{1, 70, 80, 2}})
      check_attention_shape(cpu, gpu, dt, mha(s.B, s.T, s.C, s.NH), path);
    for (const Attn& g : kGroupedShapes) check_attention_shape(cpu, gpu, dt, g, path);
  } else {
    check_attention_shape(cpu, gpu, dt, mha(2, 77, 256, 4), path);  // f32: fallback
  }
  if (gpu.name() == "cuda") gpu.ok(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash"), "configure attention=flash");
}

// attention=cudnn with deterministic=off: cuDNN's backward adding dQ with atomics, within the
// same bounds (dK and dV still the same bits when run again; dQ need not be), and the runtime
// report saying so. Where cuDNN does not load, nothing to run.
void check_cudnn_atomic(const Backend& cpu, const Backend& gpu) {
  if (gpu.ops().ctx_configure(gpu.ctx, "attention", "cudnn") != NFN_OK) return;
  gpu.ok(gpu.ops().ctx_configure(gpu.ctx, "deterministic", "off"), "configure deterministic=off");
  const std::string path = gpu.query("attention");
  expect(path.find("atomics") != std::string::npos, "attention=cudnn deterministic=off is reported as '" + path + "'");
  for (int T : {200, 1024})
    check_attention_shape(cpu, gpu, NFN_BF16, mha(2, T, 128, 2), "cudnn", " deterministic=off", false, true);
  gpu.ok(gpu.ops().ctx_configure(gpu.ctx, "deterministic", "on"), "configure deterministic=on");
  gpu.ok(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash"), "configure attention=flash");
}

void check_attention(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  struct Shape { int B, T, C, NH; };
  // T 1024 with head size 64: the GPT-2 124M benchmark's sequence (16 tiles of 64 rows).
  for (Shape s : {Shape{2, 77, 96, 3}, Shape{1, 130, 128, 2}, Shape{2, 20, 64, 4}, Shape{1, 1024, 64, 1}})
    check_attention_shape(cpu, gpu, dt, mha(s.B, s.T, s.C, s.NH), "flash");
  // Head sizes between the kernels' widths (16, 32, 64, 128) run the next wider one with the
  // real head size at run time: hd 1, 8, 24 and 36 (odd in packs: bf16's delta loads an element
  // at a time), 48, 65, 80 (GPT-3 2.7B's), 96 (GPT-3 Large's) and 100 (odd in bf16 packs).
  for (Shape s : {Shape{2, 20, 3, 3}, Shape{2, 37, 16, 2}, Shape{1, 70, 72, 3}, Shape{2, 33, 72, 2},
                  Shape{2, 65, 96, 2}, Shape{1, 40, 130, 2}, Shape{1, 77, 160, 2}, Shape{1, 130, 192, 2},
                  Shape{1, 50, 100, 1}})
    check_attention_shape(cpu, gpu, dt, mha(s.B, s.T, s.C, s.NH), "flash");
  // flash_simt with grouped-query heads and windows: the shared shapes, then head sizes
  // between its widths.
  for (const Attn& g : kGroupedShapes) check_attention_shape(cpu, gpu, dt, g, "flash");
  for (Attn g : {Attn{2, 40, 4, 1, 24, 1}, Attn{1, 100, 6, 3, 36, 33}, Attn{1, 70, 4, 2, 100, 0}})
    check_attention_shape(cpu, gpu, dt, g, "flash");
  check_attention_shape(cpu, gpu, dt, mha(2, 40, 96, 2), "flash", " (dout, out misaligned)", true);  // hd 48
  check_attention_shape(cpu, gpu, dt, mha(2, 77, 256, 4), "flash_mma", " (dout, out misaligned)", true);
  check_attention_shape(cpu, gpu, dt, {1, 130, 4, 2, 64, 40}, "flash_mma", " (dout, out misaligned)", true);
  check_attention_path(cpu, gpu, dt, "flash_mma");
  // Under the emulator, flash_mma again on a device like sm_120, whose blocks may opt in to
  // 99 KiB of shared memory: the dq kernel at head size 128 takes its single-buffered form
  // (with a window: from a key tile past the first); at 112, the largest double-buffered one
  // (90 KiB), it keeps two buffers.
  const auto optin = emulated_shared_optin(gpu);
  if (optin != nullptr && dt == NFN_BF16) {
    optin(99 * 1024);
    for (Attn g : {mha(1, 200, 256, 2), mha(1, 64, 128, 1), mha(2, 77, 256, 4), mha(1, 130, 224, 2),
                   Attn{1, 200, 4, 2, 128, 70}})
      check_attention_shape(cpu, gpu, dt, g, "flash_mma", " (99 KiB shared memory)");
    optin(0);
  }
  if (gpu.name() == "cuda") gpu.ok(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash"), "configure attention=flash");
}

void check_kv_cached(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  struct Shape { int B, Tq, pos, maxT, NH, NKV, HD, W; };
  // Head sizes 16, 32 and 64, then 8, 24, 36, 48, 80, 96, 100, 200 and 256 (any head size: the
  // kernel loops over it at run time; the training kernels stop at 128); then grouped-query
  // heads and windows (1, 3, past every position), and a decode step past the 11264 positions
  // a query may see on CUDA, inside its window.
  for (Shape s : {Shape{2, 3, 5, 16, 4, 4, 16, 0}, Shape{1, 1, 40, 48, 3, 3, 32, 0}, Shape{2, 9, 0, 9, 2, 2, 16, 0},
                  Shape{2, 2, 3, 8, 2, 2, 8, 0}, Shape{1, 2, 7, 12, 2, 2, 24, 0}, Shape{2, 1, 6, 8, 2, 2, 36, 0},
                  Shape{1, 3, 9, 12, 3, 3, 48, 0}, Shape{1, 3, 4, 8, 1, 1, 80, 0}, Shape{2, 1, 20, 24, 1, 1, 96, 0},
                  Shape{1, 2, 5, 9, 1, 1, 100, 0}, Shape{1, 2, 5, 9, 1, 1, 200, 0}, Shape{1, 1, 3, 4, 1, 1, 256, 0},
                  Shape{2, 3, 5, 16, 4, 2, 16, 0}, Shape{1, 1, 40, 48, 6, 2, 32, 7}, Shape{2, 9, 0, 9, 4, 1, 8, 3},
                  Shape{1, 2, 30, 40, 4, 4, 48, 1}, Shape{1, 4, 9, 16, 8, 2, 24, 100},
                  Shape{1, 1, 20000, 20001, 2, 1, 16, 100}}) {
    const int B = s.B, Tq = s.Tq, pos = s.pos, maxT = s.maxT, NH = s.NH, NKV = s.NKV, HD = s.HD, W = s.W;
    const size_t cache = static_cast<size_t>(B) * maxT * NKV * HD;
    const std::string dims = " Tq" + std::to_string(Tq) + " pos" + std::to_string(pos) + " hd" + std::to_string(HD) +
                             (NKV == NH ? "" : " NH" + std::to_string(NH) + " NKV" + std::to_string(NKV)) +
                             (W == 0 ? "" : " window" + std::to_string(W));
    compare(cpu, gpu, Case{"attention_kv_cached" + dims,
                           {output("out", B * Tq * NH * HD), accumulated("k_cache", random_floats(cache, rng)),
                            accumulated("v_cache", random_floats(cache, rng)),
                            input("qkv", random_floats(static_cast<size_t>(B) * Tq * (NH + 2 * NKV) * HD, rng))},
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             return b.ops().attention_kv_cached(b.ctx, P(0), P(1), P(2), P(3), B, Tq, pos, maxT,
                                                                NH, NKV, HD, W, d);
                           }},
            dt);
  }
}

void check_softmax_and_loss(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  const int N = 45, V = 1000, stride = 1024;
  compare(cpu, gpu, Case{"softmax_forward",
                         {output("out", N * V, Kind::f32), input("inp", random_floats(N * stride, rng, 4.f))},
                         [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                           return b.ops().softmax_forward(b.ctx, F(0), P(1), N, V, stride, d);
                         }},
          dt);
  const int C = 64;
  const auto x = random_floats(100 * C, rng, 0.5f);
  // Vocabularies (V in the softmax, Vp rows of wte) and rows R: 515 of 515 (rows of logits not
  // 16-byte aligned: one logit a load), 515 of 520 (16 bytes a load, the padded columns left
  // out) and 520 of 520, 100 rows; 20,001 of 20,001 and of 20,008, 24 rows, so that each of the
  // kernel's threads loads several batches of packs a row, the last pack ragged. Aligned rows
  // that fit twice in an SM's shared memory are staged there (520, 20,008); 60,000 (120 KB
  // in bf16) streams, as rows not 16-byte aligned do. Chunk sizes: the default (one chunk
  // here) and 16 rows (chunks and a ragged last). Soft caps, with the default chunks and
  // vocabularies other than 20,001: 15 (nanochat's) on logits 4 times larger (spread about
  // 3.5), and 2 on logits 8 times larger, where tanh saturates.
  for (auto [Vh, Vp, R] : {std::tuple{515, 515, 100}, std::tuple{515, 520, 100}, std::tuple{520, 520, 100},
                           std::tuple{20001, 20001, 24}, std::tuple{20001, 20008, 24},
                           std::tuple{59999, 60000, 6}}) {
    const auto wte = random_floats(Vp * C, rng, 0.3f);
    const auto targets = random_ids(R, Vh, true);
    for (auto [rows, cap] : {std::pair{0, 0.f}, std::pair{16, 0.f}, std::pair{0, 15.f}, std::pair{0, 2.f}}) {
      if (cap > 0.f && Vh == 20001) continue;  // each of the kernel's paths is covered by the others
      auto setup = [rows = rows](const Backend& b) {
        if (b.name() != "cuda") return NFN_OK;
        return b.ops().ctx_configure(b.ctx, "lm_head_rows", std::to_string(rows).c_str());
      };
      auto xs = x;
      for (float& v : xs) v *= cap == 0.f ? 1.f : cap == 15.f ? 4.f : 8.f;
      const std::string tag = " V" + std::to_string(Vh) + "/" + std::to_string(Vp) + (rows ? " (16-row chunks)" : "") +
                              (cap > 0.f ? " softcap " + std::to_string(static_cast<int>(cap)) : "");
      compare(cpu, gpu, Case{"lm_head_cross_entropy forward" + tag,
                             {output("losses", R, Kind::f32), accumulated("loss_sum", {1.25f}, Kind::f32),
                              input("x", xs), input("wte", wte), ids("targets", targets)},
                             [=, cap = cap](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                               return b.ops().lm_head_cross_entropy(b.ctx, F(0), F(1), nullptr, nullptr, P(2),
                                                                    P(3), static_cast<int32_t*>(p[4]), nullptr, R, C, Vh,
                                                                    Vp, 1.f, cap, d);
                             },
                             setup},
              dt);
      compare(cpu, gpu, Case{"lm_head_cross_entropy backward" + tag,
                             {output("losses", R, Kind::f32), accumulated("loss_sum", {0.5f}, Kind::f32),
                              output("dx", R * C), accumulated("dwte", random_floats(Vp * C, rng, 0.01f)),
                              input("x", xs), input("wte", wte), ids("targets", targets)},
                             [=, cap = cap](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                               return b.ops().lm_head_cross_entropy(b.ctx, F(0), F(1), P(2), P(3), P(4), P(5),
                                                                    static_cast<int32_t*>(p[6]), nullptr, R, C, Vh,
                                                                    Vp, 1.f / R, cap, d);
                             },
                             setup},
              dt);
      if (cap > 0.f) continue;
      // Per-row weights (RL's advantages): zero, one negative, the rest positive, so that the
      // weighted loss sum does not cancel to a small difference of bf16 losses.
      auto weights = random_floats(R, rng, 1.5f);
      for (float& w : weights) w = std::fabs(w);
      weights[0] = 0.f;
      weights[1] = -0.5f;
      compare(cpu, gpu, Case{"lm_head_cross_entropy weighted backward" + tag,
                             {output("losses", R, Kind::f32), accumulated("loss_sum", {0.5f}, Kind::f32),
                              output("dx", R * C), accumulated("dwte", random_floats(Vp * C, rng, 0.01f)),
                              input("x", xs), input("wte", wte), ids("targets", targets),
                              input("weights", weights, Kind::f32)},
                             [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                               return b.ops().lm_head_cross_entropy(b.ctx, F(0), F(1), P(2), P(3), P(4), P(5),
                                                                    static_cast<int32_t*>(p[6]), F(7), R, C, Vh, Vp,
                                                                    1.f / R, 0.f, d);
                             },
                             setup},
              dt);
    }
  }
}

// Group sizes all multiples of 4 (4 elements a load), or not (one at a time).
void check_adamw(const Backend& cpu, const Backend& gpu, nfn_dtype dt, std::array<size_t, 3> sizes) {
  const std::string dims =
      " " + std::to_string(sizes[0]) + "," + std::to_string(sizes[1]) + "," + std::to_string(sizes[2]);
  for (float max_norm : {0.f, 1.f}) {
    std::vector<Tensor> ts;
    for (size_t g = 0; g < 3; ++g) {
      const size_t n = sizes[g];
      const std::string k = std::to_string(g);
      ts.push_back(accumulated("master" + k, random_floats(n, rng), Kind::f32));
      ts.push_back(output("param" + k, n));
      ts.push_back(input("grad" + k, random_floats(n, rng, 0.1f)));
      ts.push_back(accumulated("m" + k, random_floats(n, rng, 0.01f), Kind::f32));
      std::vector<float> v = random_floats(n, rng, 0.001f);
      for (float& x : v) x = std::fabs(x);
      ts.push_back(accumulated("v" + k, v, Kind::f32));
    }
    ts.push_back(input("grad_sumsq", {42.f}, Kind::f32));  // norm 6.5: clipping applies at 1
    compare(cpu, gpu, Case{(max_norm > 0 ? "adamw_step_many (clipped)" : "adamw_step_many") + dims,
                           ts,
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             nfn_adamw_group groups[3];
                             for (int g = 0; g < 3; ++g)
                               groups[g] = nfn_adamw_group{F(5 * g), P(5 * g + 1), P(5 * g + 2), F(5 * g + 3),
                                                           F(5 * g + 4), sizes[g], g == 1 ? 0.f : 0.1f};
                             return b.ops().adamw_step_many(b.ctx, groups, 3, 7, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                                            F(15), max_norm, d);
                           }},
            dt);
  }
}

void check_adamw(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_adamw(cpu, gpu, dt, {1000, 17, 4096});
  check_adamw(cpu, gpu, dt, {1000, 20, 4096});
}

// Muon on a square, a tall and a wide matrix in one call, two steps (the second reads the
// first's momentum), with and without Nesterov. The harness compares bf16 with the CPU in
// f32, and a bf16 iteration is 1e-2 to 4e-2 of the update away from an f32 one
// (tests/py/muon_test.py), so lr keeps the update near half the master's size: large enough
// that a wrong update fails, small enough for the 1e-2 bound.
void check_muon(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  const int shapes[3][2] = {{48, 48}, {72, 24}, {24, 72}};
  for (int nesterov : {1, 0}) {
    std::vector<Tensor> ts;
    for (int g = 0; g < 3; ++g) {
      const size_t n = static_cast<size_t>(shapes[g][0]) * shapes[g][1];
      const std::string k = std::to_string(g);
      ts.push_back(accumulated("master" + k, random_floats(n, rng, 0.02f), Kind::f32));
      ts.push_back(output("param" + k, n));
      ts.push_back(input("grad" + k, random_floats(n, rng, 0.1f)));
      ts.push_back(accumulated("momentum" + k, random_floats(n, rng, 0.05f), Kind::f32));
    }
    compare(cpu, gpu, Case{nesterov ? "muon_step_many" : "muon_step_many (no nesterov)", ts,
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             nfn_muon_group groups[3];
                             for (int g = 0; g < 3; ++g)
                               groups[g] = nfn_muon_group{F(4 * g), P(4 * g + 1), P(4 * g + 2), F(4 * g + 3),
                                                          shapes[g][0], shapes[g][1]};
                             nfn_status s = b.ops().muon_step_many(b.ctx, groups, 3, 0.02f, 0.95f, nesterov, 5,
                                                                   0.1f, d);
                             if (s != NFN_OK) return s;
                             return b.ops().muon_step_many(b.ctx, groups, 3, 0.02f, 0.95f, nesterov, 5, 0.1f, d);
                           }},
            dt);
  }
}

// Ops whose result must be bit-identical: fill, convert, widen_tokens (same dtypes on both).
// Events: the host waits for a point in the stream instead of all of it. A copy into
// alloc_host memory is there once an event recorded after it is waited for, and the upload
// before an event may be rewritten once that event is waited for (the emulator checks both).
void check_events(const Backend& b, void* up, void* down, void* dev, const void* want, size_t bytes) {
  const nfn_op_table& o = b.ops();
  nfn_event *ev = nullptr, *idle = nullptr;
  b.ok(o.event_create(b.ctx, NFN_EVENT_DEFAULT, &ev), "event_create");
  b.ok(o.event_create(b.ctx, NFN_EVENT_DEFAULT, &idle), "event_create");
  if (ev == nullptr || idle == nullptr) return;
  int done = 0;
  b.ok(o.event_query(b.ctx, idle, &done), "event_query");
  expect(done == 1, b.name() + ": an event never recorded is done");
  std::memset(down, 0, bytes);
  b.ok(o.copy(b.ctx, down, dev, bytes, NFN_DEVICE_TO_HOST), "copy into alloc_host memory");
  b.ok(o.copy(b.ctx, dev, up, bytes, NFN_HOST_TO_DEVICE), "copy from alloc_host memory");
  b.ok(o.event_record(b.ctx, ev), "event_record");
  b.ok(o.event_wait(b.ctx, ev), "event_wait");
  expect(std::memcmp(down, want, bytes) == 0, b.name() + ": a copy into alloc_host memory is there after event_wait");
  done = 0;
  b.ok(o.event_query(b.ctx, ev, &done), "event_query");
  expect(done == 1, b.name() + ": an event is done once waited for");
  std::memset(up, 0x5a, bytes);  // the upload before the event has run: the buffer is free
  b.ok(o.synchronize(b.ctx), "synchronize");
  expect(o.event_wait(b.ctx, nullptr) == NFN_ERR_INVALID_ARGUMENT &&
             std::string(o.ctx_last_error(b.ctx)).find("event_wait") != std::string::npos,
         b.name() + ": event_wait of a null event is refused");
  expect(o.event_query(b.ctx, ev, nullptr) == NFN_ERR_INVALID_ARGUMENT, b.name() + ": event_query without *done");
  b.ok(o.event_free(b.ctx, ev), "event_free");
  b.ok(o.event_free(b.ctx, idle), "event_free");
}

// event_elapsed: the stream's time between two timing events. The stream is idle while the
// host sleeps between the records, so the time covers the sleep; both records and the wait
// lie inside the host's span around them, so it is no longer than that span. Before the
// wait, a backend whose stream may still be behind (CUDA; the emulator always is) refuses.
void check_event_timing(const Backend& b, void* dev, size_t bytes) {
  const nfn_op_table& o = b.ops();
  using Clock = std::chrono::steady_clock;
  nfn_event *t0 = nullptr, *t1 = nullptr, *plain = nullptr, *unrecorded = nullptr;
  b.ok(o.event_create(b.ctx, NFN_EVENT_TIMING, &t0), "event_create (timing)");
  b.ok(o.event_create(b.ctx, NFN_EVENT_TIMING, &t1), "event_create (timing)");
  b.ok(o.event_create(b.ctx, NFN_EVENT_TIMING, &unrecorded), "event_create (timing)");
  b.ok(o.event_create(b.ctx, NFN_EVENT_DEFAULT, &plain), "event_create");
  if (!t0 || !t1 || !plain || !unrecorded) return;
  const double sleep_ms = 20;
  const auto host_start = Clock::now();
  b.ok(o.event_record(b.ctx, t0), "event_record");
  b.ok(o.fill(b.ctx, dev, NFN_F32, 1.f, bytes / 4), "fill");
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
  b.ok(o.event_record(b.ctx, t1), "event_record");
  b.ok(o.event_record(b.ctx, plain), "event_record");
  float ms = -1;
  const nfn_status early = o.event_elapsed(b.ctx, t0, t1, &ms);
  const bool may_be_behind = b.name() == "cuda", emulated = emulated_shared_optin(b) != nullptr;
  const bool not_finished = std::string(o.ctx_last_error(b.ctx)).find("has not finished") != std::string::npos;
  expect(early == NFN_OK ? !emulated : may_be_behind && not_finished,
         b.name() + ": event_elapsed before the wait: status " + std::to_string(early) + " " + o.ctx_last_error(b.ctx));
  b.ok(o.event_wait(b.ctx, t1), "event_wait");
  const double host_ms = std::chrono::duration<double, std::milli>(Clock::now() - host_start).count();
  ms = -1;
  b.ok(o.event_elapsed(b.ctx, t0, t1, &ms), "event_elapsed");
  expect(ms >= 0.99 * sleep_ms && ms <= host_ms + 0.01,
         b.name() + ": event_elapsed " + std::to_string(ms) + " ms, not within the " + std::to_string(sleep_ms) +
             " ms sleep and the host's " + std::to_string(host_ms) + " ms");
  float back = 0;
  b.ok(o.event_elapsed(b.ctx, t1, t0, &back), "event_elapsed (reversed)");
  expect(std::fabs(back + ms) <= 1e-3f * ms, b.name() + ": event_elapsed end to start is the negative");
  auto refused = [&](nfn_status s, const std::string& says, const std::string& what) {
    const std::string msg = o.ctx_last_error(b.ctx);
    expect(s == NFN_ERR_INVALID_ARGUMENT && msg.find(says) != std::string::npos && msg.rfind("event_", 0) == 0,
           b.name() + ": " + what + ": status " + std::to_string(s) + " '" + msg + "'");
  };
  refused(o.event_elapsed(b.ctx, t0, plain, &ms), "NFN_EVENT_TIMING", "event_elapsed of an event without timing");
  refused(o.event_elapsed(b.ctx, unrecorded, t1, &ms), "never recorded", "event_elapsed of an event never recorded");
  refused(o.event_elapsed(b.ctx, t0, t1, nullptr), "null", "event_elapsed without *ms");
  nfn_event* bad = nullptr;
  refused(o.event_create(b.ctx, 6, &bad), "unknown flags", "event_create with unknown flags");
  for (nfn_event* e : {t0, t1, plain, unrecorded}) b.ok(o.event_free(b.ctx, e), "event_free");
}

// dequantize: random blocks (random bytes, the scales random finite halves) in each format, the
// same bits from both libraries in f32 and bf16.
template <typename Rng>
void check_dequantize(const Backend& cpu, const Backend& gpu, Rng& rng) {
  const size_t n = 32 * 37;
  for (nfn_qtype qt : {NFN_Q8_0, NFN_Q4_1, NFN_NF4}) {
    const size_t block = qt == NFN_Q8_0 ? 34 : qt == NFN_Q4_1 ? 20 : 18;
    std::vector<uint8_t> bytes(n / 32 * block);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xff);
    for (size_t b = 0; b < n / 32; ++b)  // finite scales: exponents below the top
      for (size_t at : {size_t{1}, size_t{3}})
        if (at == 1 || qt == NFN_Q4_1) bytes[b * block + at] &= 0x7b;
    for (nfn_dtype dt : {NFN_F32, NFN_BF16}) {
      const size_t e = dt == NFN_F32 ? 4 : 2;
      std::vector<uint8_t> out[2];
      const Backend* backends[2] = {&cpu, &gpu};
      for (int k = 0; k < 2; ++k) {
        const Backend& b = *backends[k];
        void* src = b.upload(bytes.data(), bytes.size());
        std::vector<uint8_t> poison(n * e, 0xff);
        void* dst = b.upload(poison.data(), poison.size());
        b.ok(b.ops().dequantize(b.ctx, dst, src, qt, n, dt), "dequantize");
        out[k].resize(n * e);
        b.download(out[k].data(), dst, n * e);
        b.ok(b.ops().free(b.ctx, src), "free");
        b.ok(b.ops().free(b.ctx, dst), "free");
      }
      expect(out[0] == out[1], "dequantize qtype " + std::to_string(static_cast<int>(qt)) +
                                   (dt == NFN_F32 ? " f32" : " bf16") + ": the libraries differ");
    }
  }
}

void check_memory(const Backend& cpu, const Backend& gpu) {
  // 0.7, -0 (a kernel) and +0 (a memset); the outputs start poisoned, so every element is checked.
  for (nfn_dtype dt : {NFN_F32, NFN_BF16})
    for (float value : {0.7f, -0.f, 0.f}) {
      const size_t n = 100003;
      Case fill{"fill", {output("dst", n)}, [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                  return b.ops().fill(b.ctx, P(0), d, value, n);
                }};
      expect(run(cpu, fill, dt) == run(gpu, fill, dt),
             "fill with " + std::to_string(value) + " differs from the CPU (dtype " + std::to_string(dt) + ")");
    }
  const size_t n = 5001;
  const auto src = random_floats(n, rng, 3.f);
  auto bytes_of = [&](nfn_dtype d) {  // src stored in dtype d
    std::vector<uint8_t> out(n * (d == NFN_F32 ? 4 : 2));
    for (size_t i = 0; i < n; ++i) {
      if (d == NFN_F32) std::memcpy(out.data() + 4 * i, &src[i], 4);
      else { uint16_t h = f32_to_bf16(src[i]); std::memcpy(out.data() + 2 * i, &h, 2); }
    }
    return out;
  };
  for (nfn_dtype from : {NFN_F32, NFN_BF16}) {
    for (nfn_dtype to : {NFN_F32, NFN_BF16}) {
      std::vector<uint8_t> results[2];
      const Backend* backends[2] = {&cpu, &gpu};
      const std::vector<uint8_t> in = bytes_of(from), poison(n * (to == NFN_F32 ? 4 : 2), 0xff);
      for (int k = 0; k < 2; ++k) {
        const Backend& b = *backends[k];
        void* src_d = b.upload(in.data(), in.size());
        void* dst_d = b.upload(poison.data(), poison.size());
        b.ok(b.ops().convert(b.ctx, dst_d, to, src_d, from, n), "convert");
        results[k].resize(poison.size());
        b.download(results[k].data(), dst_d, poison.size());
        b.ok(b.ops().free(b.ctx, src_d), "free");
        b.ok(b.ops().free(b.ctx, dst_d), "free");
      }
      // Independent of both libraries: converting src to `to` on the host (through `from`).
      const std::vector<uint8_t> want = from == NFN_BF16 && to == NFN_F32 ? [&] {
        std::vector<uint8_t> w(n * 4);
        for (size_t i = 0; i < n; ++i) { float f = round_bf16(src[i]); std::memcpy(w.data() + 4 * i, &f, 4); }
        return w;
      }() : bytes_of(to);
      expect(results[1] == want && results[0] == want,
             "convert " + std::to_string(from) + "->" + std::to_string(to) + " differs from the host conversion");
    }
  }
  std::vector<uint16_t> narrow(n);
  for (size_t i = 0; i < n; ++i) narrow[i] = static_cast<uint16_t>(1 + rng() % 65535);
  std::vector<int32_t> results[2];
  const Backend* backends[2] = {&cpu, &gpu};
  for (int k = 0; k < 2; ++k) {
    const Backend& b = *backends[k];
    std::vector<int32_t> poison(n, -7);
    void* src_d = b.upload(narrow.data(), n * 2);
    void* dst_d = b.upload(poison.data(), n * 4);
    b.ok(b.ops().widen_tokens(b.ctx, static_cast<int32_t*>(dst_d), static_cast<uint16_t*>(src_d), n), "widen_tokens");
    results[k].resize(n);
    b.download(results[k].data(), dst_d, n * 4);
    b.ok(b.ops().free(b.ctx, src_d), "free");
    b.ok(b.ops().free(b.ctx, dst_d), "free");
  }
  bool widened = true;
  for (size_t i = 0; i < n; ++i) widened = widened && results[1][i] == narrow[i];
  expect(widened && results[0] == results[1], "widen_tokens differs from the CPU or from the input");
  check_dequantize(cpu, gpu, rng);
  // Page-locked host memory both ways: up from one buffer, down into another.
  for (const Backend* b : backends) {
    void *up = nullptr, *down = nullptr, *dev = nullptr;
    const size_t bytes = n * 2;
    b->ok(b->ops().alloc_host(b->ctx, bytes, &up), "alloc_host");
    b->ok(b->ops().alloc_host(b->ctx, bytes, &down), "alloc_host");
    b->ok(b->ops().alloc(b->ctx, bytes, &dev), "alloc");
    if (!up || !down || !dev) continue;
    std::memcpy(up, narrow.data(), bytes);
    std::memset(down, 0, bytes);
    b->ok(b->ops().copy(b->ctx, dev, up, bytes, NFN_HOST_TO_DEVICE), "copy from alloc_host memory");
    b->ok(b->ops().copy(b->ctx, down, dev, bytes, NFN_DEVICE_TO_HOST), "copy into alloc_host memory");
    b->ok(b->ops().synchronize(b->ctx), "synchronize");
    expect(std::memcmp(down, narrow.data(), bytes) == 0, b->name() + ": a round trip through alloc_host memory");
    check_events(*b, up, down, dev, narrow.data(), bytes);
    check_event_timing(*b, dev, bytes);
    b->ok(b->ops().free(b->ctx, dev), "free");
    b->ok(b->ops().free_host(b->ctx, up), "free_host");
    b->ok(b->ops().free_host(b->ctx, down), "free_host");
  }
}

void check_sum_squares(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  // One element at a time (counts that are not whole 16-byte packs), then 16 bytes a load.
  for (const std::array<size_t, 4>& sizes : {std::array<size_t, 4>{1, 4097, 1 << 18, 77},
                                             std::array<size_t, 4>{8, 4096, 1 << 18, 80}}) {
    std::vector<Tensor> ts{output("out", 1, Kind::f32)};
    for (size_t n : sizes) ts.push_back(input("buf", random_floats(n, rng)));
    const std::string name = "sum_squares_many " + std::to_string(sizes[0]) + "," + std::to_string(sizes[1]) + ",...";
    compare(cpu, gpu, Case{name, ts,
                           [=](const Backend& b, const std::vector<void*>& p, nfn_dtype d) {
                             const void* bufs[4] = {P(1), P(2), P(3), P(4)};
                             return b.ops().sum_squares_many(b.ctx, bufs, sizes.data(), 4, d, F(0));
                           }},
            dt);
  }
}

// Every op in dtype dt (memory, errors and graphs are checked once, apart).
void check_ops(const Backend& cpu, const Backend& gpu, nfn_dtype dt) {
  check_sum_squares(cpu, gpu, dt);
  check_embedding(cpu, gpu, dt);
  check_norms(cpu, gpu, dt);
  check_linear(cpu, gpu, dt);
  check_elementwise(cpu, gpu, dt);
  check_decoder_activations(cpu, gpu, dt);
  check_rope(cpu, gpu, dt);
  check_scaled_sum(cpu, gpu, dt);
  check_gated_add(cpu, gpu, dt);
  check_head_norm(cpu, gpu, dt);
  check_attention(cpu, gpu, dt);
  check_kv_cached(cpu, gpu, dt);
  check_softmax_and_loss(cpu, gpu, dt);
  check_adamw(cpu, gpu, dt);
  check_muon(cpu, gpu, dt);
}

// Bad arguments are refused with a status and a message naming the op.
// The harness's rerun check on one backend: a value that moves between runs fails it, unless
// the case marks it order-dependent, and then only that value is let go.
void check_order_dependent(const Backend& b) {
  static int calls = 0;
  Case c{"order-dependent values",
         {output("out", 4)},
         [](const Backend& be, const std::vector<void*>& p, nfn_dtype) {
           const float host[4] = {static_cast<float>(++calls), 1.f, 2.f, 3.f};  // out[0] moves
           return be.ops().copy(be.ctx, P(0), host, sizeof host, NFN_HOST_TO_DEVICE);
         }};
  const auto first = run(b, c, NFN_F32);
  auto caught = [&] {
    const int before = failures;
    quiet = true;
    expect_rerun_identical(b, c, NFN_F32, first);
    quiet = false;
    const bool failed = failures > before;
    failures = before;
    return failed;
  };
  expect(caught(), "the rerun check catches a value that moved");
  c.order_dependent = [](const std::string& t, size_t i) { return t == "out" && i == 0; };
  expect(!caught(), "the rerun check lets go of a value marked order-dependent");
  c.order_dependent = [](const std::string& t, size_t i) { return t == "out" && i == 1; };
  expect(caught(), "the rerun check still catches a moved value that is not marked");
}

// Arguments the CPU library refuses on the host, which the CUDA one must refuse too, or, where
// only the device sees them (ids, targets), must not read or write outside its buffers for.
void check_contract(const Backend& gpu) {
  const nfn_op_table& o = gpu.ops();
  auto refused = [&](nfn_status s, nfn_status want, const std::string& what, const std::string& says) {
    const std::string msg = o.ctx_last_error(gpu.ctx);
    expect(s == want && msg.find(says) != std::string::npos,
           what + ": status " + std::to_string(s) + " '" + msg + "', expected '" + says + "'");
  };
  // A failed call's error is its own: the next op does not report it.
  void* huge = nullptr;
  expect(o.alloc(gpu.ctx, SIZE_MAX, &huge) != NFN_OK, "alloc(SIZE_MAX) is refused");
  std::vector<float> host(64, 1.f);
  void* dev = gpu.upload(host.data(), host.size() * sizeof(float));
  expect(o.fill(gpu.ctx, dev, NFN_F32, 2.f, 64) == NFN_OK, std::string("fill after a failed alloc: ") +
                                                                o.ctx_last_error(gpu.ctx));
  // No context: refused, never read.
  void* p = nullptr;
  nfn_event* e = nullptr;
  expect(o.alloc(nullptr, 8, &p) == NFN_ERR_INVALID_ARGUMENT && o.synchronize(nullptr) == NFN_ERR_INVALID_ARGUMENT &&
             o.graph_begin(nullptr) == NFN_ERR_INVALID_ARGUMENT &&
             o.event_create(nullptr, NFN_EVENT_DEFAULT, &e) == NFN_ERR_INVALID_ARGUMENT,
         "ops without a context are refused");
  refused(o.attention_kv_cached(gpu.ctx, dev, dev, dev, dev, 1, 1, INT32_MAX, 16, 1, 1, 64, 0, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "kv_cached at pos INT_MAX", "do not fit the cache");
  refused(o.attention_forward(gpu.ctx, dev, nullptr, dev, 65536, 8, 65536, 65536, 1, 0, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "attention_forward with B*NH = 2^32", "B*NH=4294967296 exceeds 65535");
  refused(o.linear_forward(gpu.ctx, dev, dev, dev, dev, nullptr, nullptr, 2, 4, 8, NFN_EPILOGUE_GELU, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "linear_forward with aux == out", "aux must not alias out");
  // Only dbias and dinp_colsum may be NULL in layernorm_backward, only dweight in
  // rmsnorm_backward (nfn_ops.def), as the CPU library holds it.
  float* stats = static_cast<float*>(dev);
  refused(o.layernorm_backward(gpu.ctx, dev, nullptr, nullptr, nullptr, dev, dev, dev, stats, stats, 2, 8, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "layernorm_backward without dweight", "null dinp, dweight");
  refused(o.layernorm_backward(gpu.ctx, nullptr, dev, nullptr, nullptr, dev, dev, dev, stats, stats, 2, 8, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "layernorm_backward without dinp", "null dinp, dweight");
  refused(o.rmsnorm_backward(gpu.ctx, nullptr, nullptr, dev, dev, nullptr, stats, 2, 8, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "rmsnorm_backward without dinp", "null dinp");
  refused(o.adamw_step_many(gpu.ctx, nullptr, 0, 1, 1e-3f, 1.f, 0.999f, 1e-8f, nullptr, 0.f, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "adamw beta1 = 1", "betas");
  refused(o.adamw_step_many(gpu.ctx, nullptr, 0, 1, 1e-3f, 0.9f, 0.999f, 0.f, nullptr, 0.f, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "adamw eps = 0", "eps must be positive");
  refused(o.adamw_step_many(gpu.ctx, nullptr, 0, 1, NAN, 0.9f, 0.999f, 1e-8f, nullptr, 0.f, NFN_F32),
          NFN_ERR_INVALID_ARGUMENT, "adamw lr = NaN", "lr=nan");
  {
    float dummy = 0.f;
    nfn_muon_group bad{&dummy, nullptr, &dummy, &dummy, 0, 4};
    refused(o.muon_step_many(gpu.ctx, &bad, 1, 0.02f, 0.95f, 1, 5, 0.f, NFN_F32), NFN_ERR_INVALID_ARGUMENT,
            "muon rows = 0", "rows and cols must be positive");
    bad.rows = 4, bad.grad = nullptr;
    refused(o.muon_step_many(gpu.ctx, &bad, 1, 0.02f, 0.95f, 1, 5, 0.f, NFN_F32), NFN_ERR_INVALID_ARGUMENT,
            "muon null grad", "null master, grad or momentum");
    refused(o.muon_step_many(gpu.ctx, nullptr, 0, 0.02f, 0.95f, 1, -1, 0.f, NFN_F32), NFN_ERR_INVALID_ARGUMENT,
            "muon ns_steps = -1", "ns_steps=-1 must lie in [0, 5]");
  }
  // Ids only the device reads: a negative token embeds as NaN and adds to no dwte row; a
  // target past the vocabulary scores NaN with a zero gradient. Nothing outside is touched.
  const int C = 8, V = 10, Vp = 16, N = 2;
  std::vector<int32_t> tokens = {-1, 2};
  std::vector<float> wte_host(Vp * C, 0.5f), out_host(N * C), dwte_host(Vp * C);
  void* tok = gpu.upload(tokens.data(), tokens.size() * 4);
  void* wte = gpu.upload(wte_host.data(), wte_host.size() * 4);
  void* out = gpu.upload(out_host.data(), out_host.size() * 4);
  void* dwte = gpu.upload(std::vector<float>(Vp * C, 0.f).data(), Vp * C * 4);
  void* dout = gpu.upload(std::vector<float>(N * C, 1.f).data(), N * C * 4);
  if (gpu.ok(o.embedding_forward(gpu.ctx, out, static_cast<const int32_t*>(tok), wte, nullptr, 1, N, C, NFN_F32),
             "embedding_forward with a negative token") &&
      gpu.ok(o.embedding_backward(gpu.ctx, dwte, nullptr, dout, static_cast<const int32_t*>(tok), 1, N, C, NFN_F32),
             "embedding_backward with a negative token")) {
    gpu.download(out_host.data(), out, out_host.size() * 4);
    gpu.download(dwte_host.data(), dwte, dwte_host.size() * 4);
    bool ok = true;
    for (int c = 0; c < C; ++c) ok = ok && std::isnan(out_host[c]) && out_host[C + c] == 0.5f;
    for (int v = 0; v < Vp; ++v)
      for (int c = 0; c < C; ++c) ok = ok && dwte_host[v * C + c] == (v == 2 ? 1.f : 0.f);
    expect(ok, "a negative token: a NaN row forward, no dwte row backward");
  }
  std::vector<int32_t> targets = {3, V + 2};
  std::vector<float> losses(N, -1.f), dx(N * C);
  void* tgt = gpu.upload(targets.data(), targets.size() * 4);
  void* loss_dev = gpu.upload(losses.data(), losses.size() * 4);
  void* dx_dev = gpu.upload(dx.data(), dx.size() * 4);
  if (gpu.ok(o.lm_head_cross_entropy(gpu.ctx, static_cast<float*>(loss_dev), nullptr, dx_dev, nullptr, dev, wte,
                                     static_cast<const int32_t*>(tgt), nullptr, N, C, V, Vp, 1.f, 0.f, NFN_F32),
             "lm_head_cross_entropy with a target past V")) {
    gpu.download(losses.data(), loss_dev, losses.size() * 4);
    gpu.download(dx.data(), dx_dev, dx.size() * 4);
    bool ok = std::isfinite(losses[0]) && std::isnan(losses[1]);
    for (int c = 0; c < C; ++c) ok = ok && std::isfinite(dx[c]) && dx[C + c] == 0.f;
    expect(ok, "a target past V: loss NaN, gradient 0, the other row scored");
  }
  for (void* d : {dev, tok, wte, out, dwte, dout, tgt, loss_dev, dx_dev}) gpu.ok(o.free(gpu.ctx, d), "free");
}

// The decoder ops refuse the same bad arguments with the same status and message in both
// libraries (rope's checks are one function, cc/ops/rope.h, as scaled_sum's and gated_add's
// are, cc/ops/mix_args.h, the norms', cc/ops/norm_args.h, and attention's geometry,
// cc/ops/attention_geometry.h); the CUDA library also refuses rope heads wider than the 256 its
// kernel carries frequencies for.
void check_decoder_refusals(const Backend& cpu, const Backend& gpu) {
  using Refused = std::function<nfn_status(const nfn_op_table&, nfn_ctx*, void*)>;
  auto rope = [](int N, int T, int pos, int stride, int NH, int NKV, int HD, float theta, int sign) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return o.rope_forward(ctx, p, p, N, T, pos, stride, NH, NKV, HD, theta, sign, NFN_F32);
    };
  };
  auto attention = [](int T, int NH, int NKV, int HD, int W, bool forward) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return forward ? o.attention_forward(ctx, p, static_cast<float*>(p), p, 1, T, NH, NKV, HD, W, NFN_F32)
                     : o.attention_backward(ctx, p, p, p, p, static_cast<float*>(p), 1, T, NH, NKV, HD, W, NFN_F32);
    };
  };
  auto cached = [](int pos, int NH, int NKV, int HD, int W) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return o.attention_kv_cached(ctx, p, p, p, p, 1, 1, pos, 4, NH, NKV, HD, W, NFN_F32);
    };
  };
  auto softcap = [](float cap, bool forward) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return forward ? o.softcap_forward(ctx, p, p, 8, cap, NFN_F32)
                     : o.softcap_backward(ctx, p, p, p, 8, cap, NFN_F32);
    };
  };
  // all_given false: the forward's add, the backward's dout, NULL
  auto gated_add = [](int N, int T, int H, int D, int G, int shift, int out_stride, int gin_stride, int add_stride,
                      float scale, bool forward, bool all_given) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      void* q = all_given ? p : nullptr;
      return forward ? o.gated_add_forward(ctx, p, p, p, nullptr, q, N, T, H, D, G, shift, out_stride, gin_stride,
                                           add_stride, scale, NFN_F32)
                     : o.gated_add_backward(ctx, p, p, p, p, q, p, p, nullptr, p, N, T, H, D, G, shift, out_stride,
                                            gin_stride, add_stride, scale, NFN_F32);
    };
  };
  auto rmsnorm = [](float eps) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return o.rmsnorm_forward(ctx, p, static_cast<float*>(p), p, nullptr, 2, 8, eps, NFN_F32);
    };
  };
  auto head_norm = [](int D, int stride, float scale, float eps, bool forward) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      auto* stats = static_cast<float*>(p);
      return forward ? o.head_rmsnorm_forward(ctx, p, stats, p, 2, 2, D, stride, scale, eps, NFN_F32)
                     : o.head_rmsnorm_backward(ctx, p, p, p, eps > 0.f ? stats : nullptr, 2, 2, D, stride, scale,
                                               NFN_F32);
    };
  };
  auto lm_head = [](float cap) -> Refused {
    return [=](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
      return o.lm_head_cross_entropy(ctx, nullptr, nullptr, nullptr, nullptr, p, p, static_cast<int32_t*>(p), nullptr, 2, 4, 8,
                                     8, 1.f, cap, NFN_F32);
    };
  };
  const std::vector<std::pair<std::string, Refused>> cases = {
      {"rmsnorm_forward eps 0", rmsnorm(0.f)},
      {"rmsnorm_forward eps NaN", rmsnorm(NAN)},
      {"rmsnorm_forward eps inf", rmsnorm(INFINITY)},
      {"head_rmsnorm_forward stride below H*D", head_norm(8, 15, 1.2f, 1e-6f, true)},
      {"head_rmsnorm_forward D 0", head_norm(0, 16, 1.2f, 1e-6f, true)},
      {"head_rmsnorm_forward eps -1", head_norm(8, 16, 1.2f, -1.f, true)},
      {"head_rmsnorm_forward scale 0", head_norm(8, 16, 0.f, 1e-6f, true)},
      {"head_rmsnorm_backward scale inf", head_norm(8, 16, INFINITY, 1e-6f, false)},
      {"head_rmsnorm_backward null rstd", head_norm(8, 16, 1.2f, 0.f, false)},
      {"lm_head_cross_entropy softcap -1", lm_head(-1.f)},
      {"lm_head_cross_entropy softcap NaN", lm_head(NAN)},
      {"lm_head_cross_entropy softcap inf", lm_head(INFINITY)},
      {"rope_forward odd head dim", rope(2, 2, 0, 64, 4, 2, 7, 1e4f, 1)},
      {"rope_forward stride below the q and k heads", rope(2, 2, 0, 47, 4, 2, 8, 1e4f, 1)},
      {"rope_forward NKV not dividing NH", rope(2, 2, 0, 64, 4, 3, 8, 1e4f, 1)},
      {"rope_forward N not a multiple of T", rope(3, 2, 0, 64, 4, 2, 8, 1e4f, 1)},
      {"rope_forward negative pos_offset", rope(2, 2, -1, 64, 4, 2, 8, 1e4f, 1)},
      {"rope_forward positions past 2^24", rope(2, 2, (1 << 24) - 1, 64, 4, 2, 8, 1e4f, 1)},
      {"rope_forward theta 0", rope(2, 2, 0, 64, 4, 2, 8, 0.f, 1)},
      {"rope_forward sign 0", rope(2, 2, 0, 64, 4, 2, 8, 1e4f, 0)},
      {"rope_backward null dout",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.rope_backward(ctx, p, nullptr, 2, 2, 0, 64, 4, 2, 8, 1e4f, 1, NFN_F32);
       }},
      {"relu_squared_forward null inp",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.relu_squared_forward(ctx, p, nullptr, 8, NFN_F32);
       }},
      {"swiglu_forward H 0",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) { return o.swiglu_forward(ctx, p, p, 2, 0, NFN_F32); }},
      {"swiglu_backward null dout",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.swiglu_backward(ctx, p, p, nullptr, 2, 4, NFN_F32);
       }},
      {"attention_forward NKV not dividing NH", attention(2, 4, 3, 4, 0, true)},
      {"attention_forward NKV 0", attention(2, 4, 0, 4, 0, true)},
      {"attention_forward HD 0", attention(2, 4, 2, 0, 0, true)},
      {"attention_forward negative window", attention(2, 4, 2, 4, -1, true)},
      {"attention_forward T 0", attention(0, 4, 2, 4, 0, true)},
      {"attention_backward NKV above NH", attention(2, 2, 4, 4, 0, false)},
      {"attention_backward negative window", attention(2, 4, 2, 4, -5, false)},
      {"attention_backward null lse",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.attention_backward(ctx, p, p, p, p, nullptr, 1, 2, 4, 2, 4, 0, NFN_F32);
       }},
      {"attention_kv_cached NKV not dividing NH", cached(0, 6, 4, 4, 0)},
      {"attention_kv_cached negative window", cached(0, 4, 2, 4, -1)},
      {"attention_kv_cached positions past the cache", cached(4, 4, 2, 4, 0)},
      {"softcap_forward cap 0", softcap(0.f, true)},
      {"softcap_forward cap NaN", softcap(NAN, true)},
      {"softcap_backward cap -1", softcap(-1.f, false)},
      {"softcap_backward cap inf", softcap(INFINITY, false)},
      {"scaled_sum_forward null y",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.scaled_sum_forward(ctx, p, p, nullptr, nullptr, nullptr, 1.f, 1.f, 8, NFN_F32);
       }},
      {"scaled_sum_forward ca NaN",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.scaled_sum_forward(ctx, p, p, p, nullptr, nullptr, NAN, 1.f, 8, NFN_F32);
       }},
      {"scaled_sum_backward null dout",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.scaled_sum_backward(ctx, p, p, nullptr, nullptr, nullptr, p, p, nullptr, nullptr, 1.f, 1.f, 8,
                                      NFN_F32);
       }},
      {"scaled_sum_backward da without x",
       [](const nfn_op_table& o, nfn_ctx* ctx, void* p) {
         return o.scaled_sum_backward(ctx, p, p, p, nullptr, p, nullptr, p, nullptr, nullptr, 1.f, 1.f, 8, NFN_F32);
       }},
      {"gated_add_forward null add", gated_add(4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f, true, false)},
      {"gated_add_forward N not a multiple of T", gated_add(4, 3, 2, 4, 3, 0, 8, 3, 8, 1.f, true, true)},
      {"gated_add_forward D 0", gated_add(4, 2, 2, 0, 3, 0, 8, 3, 8, 1.f, true, true)},
      {"gated_add_forward shift 2", gated_add(4, 2, 2, 4, 3, 2, 8, 3, 8, 1.f, true, true)},
      {"gated_add_forward gin_stride below G", gated_add(4, 2, 2, 4, 3, 0, 8, 2, 8, 1.f, true, true)},
      {"gated_add_backward add_stride below H*D", gated_add(4, 2, 2, 4, 3, 0, 8, 3, 7, 1.f, false, true)},
      {"gated_add_backward scale inf", gated_add(4, 2, 2, 4, 3, 0, 8, 3, 8, INFINITY, false, true)},
      {"gated_add_backward null dout", gated_add(4, 2, 2, 4, 3, 0, 8, 3, 8, 1.f, false, false)},
  };
  const std::vector<float> host(64, 1.f);
  void* on_cpu = cpu.upload(host.data(), host.size() * sizeof(float));
  void* on_gpu = gpu.upload(host.data(), host.size() * sizeof(float));
  for (const auto& [what, call] : cases) {
    const nfn_status want = call(cpu.ops(), cpu.ctx, on_cpu), got = call(gpu.ops(), gpu.ctx, on_gpu);
    const std::string cpu_says = cpu.ops().ctx_last_error(cpu.ctx), gpu_says = gpu.ops().ctx_last_error(gpu.ctx);
    expect(want == NFN_ERR_INVALID_ARGUMENT && got == want && gpu_says == cpu_says,
           what + ": cpu " + std::to_string(want) + " '" + cpu_says + "', cuda " + std::to_string(got) + " '" +
               gpu_says + "'");
  }
  if (gpu.name() == "cuda") {
    const nfn_status wide = rope(1, 1, 0, 6 * 258, 4, 2, 258, 1e4f, 1)(gpu.ops(), gpu.ctx, on_gpu);
    const std::string why = gpu.ops().ctx_last_error(gpu.ctx);
    expect(wide == NFN_ERR_UNSUPPORTED && why == "rope_forward: head dim HD=258 exceeds 256",
           "rope_forward at HD 258: status " + std::to_string(wide) + " '" + why + "'");
  }
  cpu.ok(cpu.ops().free(cpu.ctx, on_cpu), "free");
  gpu.ok(gpu.ops().free(gpu.ctx, on_gpu), "free");
}

// nfn_ctx_query's keys (nfn_tile_ops.h): each answers; thunderkittens says "available"
// exactly where configure takes attention=thunderkittens, else configure's own reason, with or
// without a context; an unknown key, or a context key asked without one, is NULL.
void check_queries(const Backend& gpu) {
  expect(!gpu.query("device").empty(), "ctx_query device names the device");
  expect(gpu.query("gemm_tune") == "off", "ctx_query gemm_tune is off on a fresh context: " + gpu.query("gemm_tune"));
  gpu.query("fused_epilogues");
  const std::string tk = gpu.query("thunderkittens");
  const char* library_wide = gpu.ops().ctx_query(nullptr, "thunderkittens");
  expect(library_wide != nullptr && tk == library_wide, "ctx_query thunderkittens is the same without a context");
  const bool takes = gpu.ops().ctx_configure(gpu.ctx, "attention", "thunderkittens") == NFN_OK;
  expect(takes ? tk == "available"
               : std::string(gpu.ops().ctx_last_error(gpu.ctx)) == "configure: attention=thunderkittens: " + tk,
         "ctx_query thunderkittens '" + tk + "' agrees with configure attention=thunderkittens");
  expect(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash") == NFN_OK, "configure attention=flash");
  expect(gpu.ops().ctx_query(gpu.ctx, "no_such_key") == nullptr, "ctx_query of an unknown key is NULL");
  expect(gpu.ops().ctx_query(nullptr, "device") == nullptr, "ctx_query device without a context is NULL");
}

void check_errors(const Backend& gpu) {
  check_contract(gpu);
  const nfn_status s = gpu.ops().attention_forward(gpu.ctx, nullptr, nullptr, nullptr, 1, 8, 4, 3, 8, 0, NFN_F32);
  const std::string msg = gpu.ops().ctx_last_error(gpu.ctx);
  expect(s == NFN_ERR_INVALID_ARGUMENT && msg.find("attention_forward") != std::string::npos,
         "attention_forward with NH % NKV != 0: status " + std::to_string(s) + " '" + msg + "'");
  // Head sizes up to 128 run (flash_simt's widest kernel); 129 is refused before anything is read.
  for (bool fwd : {true, false}) {
    const nfn_op_table& o = gpu.ops();
    const nfn_status wide = fwd ? o.attention_forward(gpu.ctx, nullptr, nullptr, nullptr, 1, 8, 2, 2, 129, 0, NFN_F32)
                                : o.attention_backward(gpu.ctx, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 2,
                                                       1, 129, 0, NFN_BF16);
    const std::string why = gpu.ops().ctx_last_error(gpu.ctx);
    const std::string op = fwd ? "attention_forward" : "attention_backward";
    expect(wide == NFN_ERR_UNSUPPORTED && why == op + ": head dim HD=129 exceeds 128",
           op + " at head size 129: status " + std::to_string(wide) + " '" + why + "'");
  }
  expect(gpu.ops().ctx_configure(gpu.ctx, "attention", "warp-speed") == NFN_ERR_INVALID_ARGUMENT,
         "configure attention=warp-speed is refused");
  expect(gpu.ops().ctx_configure(gpu.ctx, "gemm_tune", "maybe") == NFN_ERR_INVALID_ARGUMENT,
         "configure gemm_tune=maybe is refused");
  expect(gpu.ops().ctx_configure(gpu.ctx, "gemm_tune_cache", "") == NFN_ERR_INVALID_ARGUMENT,
         "configure gemm_tune_cache= (no path) is refused");
  expect(gpu.ops().ctx_configure(gpu.ctx, "deterministic", "maybe") == NFN_ERR_INVALID_ARGUMENT,
         "configure deterministic=maybe is refused");
  expect(gpu.ops().ctx_configure(gpu.ctx, "overlap", "maybe") == NFN_ERR_INVALID_ARGUMENT,
         "configure overlap=maybe is refused");
  expect(gpu.ops().ctx_configure(gpu.ctx, "pdl", "maybe") == NFN_ERR_INVALID_ARGUMENT,
         "configure pdl=maybe is refused");
  // The path's name for the runtime report. main() calls this before any configure: a fresh
  // context's default, cudnn where cuDNN loads (configure says), else flash_mma.
  const std::string fresh = gpu.query("attention");
  const bool cudnn = gpu.ops().ctx_configure(gpu.ctx, "attention", "cudnn") == NFN_OK;
  expect(fresh.rfind(cudnn ? "cudnn" : "flash_mma", 0) == 0,
         "the default attention is reported as '" + fresh + "' (cuDNN " + (cudnn ? "loads" : "does not load") + ")");
  expect(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash_mma") == NFN_OK, "configure attention=flash_mma");
  expect(gpu.query("attention").rfind("flash_mma", 0) == 0,
         "attention=flash_mma is reported as '" + gpu.query("attention") + "'");
  expect(gpu.ops().ctx_configure(gpu.ctx, "attention", "flash") == NFN_OK, "configure attention=flash");
  expect(gpu.query("attention").rfind("flash_simt", 0) == 0,
         "attention=flash is reported as '" + gpu.query("attention") + "'");
  check_queries(gpu);
}

}  // namespace

int main(int argc, char** argv) {
  // --self-check: both libraries are the CPU one, in f32 only: exercises this harness
  // (uploads, poisoning, comparisons) on machines without a GPU.
  const bool self_check = argc == 4 && std::string(argv[3]) == "--self-check";
  if (argc != 3 && !self_check) {
    std::printf("usage: ops_parity_test CPU_LIB CUDA_LIB [--self-check]\n");
    return 2;
  }
  Backend cpu, gpu;
  std::string error;
  if (!nfn::load_op_library(argv[1], &cpu.lib, &error) || !nfn::load_op_library(argv[2], &gpu.lib, &error)) {
    std::printf("FAIL: %s\n", error.c_str());
    return 1;
  }
  if (gpu.ops().ctx_create(0, &gpu.ctx) != NFN_OK) {
    const std::string reason = gpu.ops().ctx_last_error(nullptr);
    // Where no driver is installed at all, the reason says so (the runtime's own words are
    // "driver version is insufficient", as for a driver that is only too old).
    void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libcuda != nullptr)
      dlclose(libcuda);
    else if (reason.find("no NVIDIA driver is installed") == std::string::npos) {
      std::printf("FAIL: no libcuda.so.1 here, but the CUDA library's reason does not say so: %s\n", reason.c_str());
      return 1;
    }
    std::printf("SKIP: CUDA op parity not run: %s\n", reason.c_str());
    return 0;
  }
  if (cpu.ops().ctx_create(0, &cpu.ctx) != NFN_OK) {
    std::printf("FAIL: CPU context: %s\n", cpu.ops().ctx_last_error(nullptr));
    return 1;
  }
  check_memory(cpu, gpu);
  check_order_dependent(cpu);
  check_decoder_refusals(cpu, gpu);
  if (!self_check) check_errors(gpu);
  if (!self_check) check_graphs(gpu, rng);
  for (nfn_dtype dt : {NFN_F32, NFN_BF16}) {
    if (self_check && dt == NFN_BF16) break;  // the CPU computes in f32 only
    check_ops(cpu, gpu, dt);
  }
  // The GEMMs again with gemm_tune=on: a shape's first call times cuBLASLt's picks into
  // outputs of its own, so the results (accumulating ones too) must not move. Not under the
  // emulator, whose GEMM stands in for cuBLASLt and has nothing to tune. The picks go to a
  // file of the suite's own; a second context then takes them from it (checked by cuBLASLt
  // before use) instead of timing again, with the same results.
  const bool emulated = dlsym(gpu.lib.handle, "nfn_emu_shared_optin") != nullptr;
  if (!self_check && !emulated) {
    char dir[] = "/tmp/nfn_parity_picks_XXXXXX";
    const std::string picks = std::string(mkdtemp(dir) ? dir : "/tmp") + "/picks.txt";
    auto tuned = [&](unsigned* timed, unsigned* kept) {
      return std::sscanf(gpu.query("gemm_tune").c_str(), "on: %u shapes timed, %u taken from", timed, kept) == 2;
    };
    expect(gpu.ops().ctx_configure(gpu.ctx, "gemm_tune_cache", picks.c_str()) == NFN_OK &&
               gpu.ops().ctx_configure(gpu.ctx, "gemm_tune", "on") == NFN_OK,
           "configure gemm_tune=on with a picks file");
    for (nfn_dtype dt : {NFN_F32, NFN_BF16}) {
      check_linear(cpu, gpu, dt);
      check_softmax_and_loss(cpu, gpu, dt);
    }
    unsigned timed = 0, kept = 0;
    expect(tuned(&timed, &kept) && timed > 0 && kept == 0,
           "gemm_tune timed shapes and kept none: " + gpu.query("gemm_tune"));
    expect(gpu.ops().ctx_configure(gpu.ctx, "gemm_tune", "off") == NFN_OK, "configure gemm_tune=off");
    nfn_ctx* first = gpu.ctx;
    if (gpu.ops().ctx_create(0, &gpu.ctx) == NFN_OK) {
      expect(gpu.ops().ctx_configure(gpu.ctx, "gemm_tune_cache", picks.c_str()) == NFN_OK &&
                 gpu.ops().ctx_configure(gpu.ctx, "gemm_tune", "on") == NFN_OK,
             "configure a second context with the same picks file");
      for (nfn_dtype dt : {NFN_F32, NFN_BF16}) check_linear(cpu, gpu, dt);
      expect(tuned(&timed, &kept) && kept > 0,
             "a second context took picks from the file: " + gpu.query("gemm_tune"));
      gpu.ops().ctx_destroy(gpu.ctx);
    } else {
      expect(false, std::string("a second CUDA context: ") + gpu.ops().ctx_last_error(nullptr));
    }
    gpu.ctx = first;
  }
  // The linear ops again with overlap=on: the weight and bias gradients on a second stream,
  // joined before each call returns, so the results must not move (under the emulator too,
  // whose streams run in issue order: there it checks the fork and join are issued).
  if (!self_check) {
    expect(gpu.ops().ctx_configure(gpu.ctx, "overlap", "on") == NFN_OK, "configure overlap=on");
    for (nfn_dtype dt : {NFN_F32, NFN_BF16}) check_linear(cpu, gpu, dt);
    expect(gpu.ops().ctx_configure(gpu.ctx, "overlap", "off") == NFN_OK, "configure overlap=off");
  }
  // Every op again in bf16 with pdl=on: each of the library's kernels may start while the one
  // before it finishes, and waits in pdl_begin until its writes are visible, so the results
  // must not move. Not under the emulator, which runs launches one after another either way
  // (it checks instead that every kernel calls pdl_begin first).
  if (!self_check && !emulated) {
    expect(gpu.ops().ctx_configure(gpu.ctx, "pdl", "on") == NFN_OK, "configure pdl=on");
    check_ops(cpu, gpu, NFN_BF16);
    // Recorded into graphs (programmatic edges), and beside the second stream of overlap=on.
    check_graphs(gpu, rng);
    expect(gpu.ops().ctx_configure(gpu.ctx, "overlap", "on") == NFN_OK, "configure overlap=on with pdl=on");
    check_linear(cpu, gpu, NFN_BF16);
    expect(gpu.ops().ctx_configure(gpu.ctx, "overlap", "off") == NFN_OK, "configure overlap=off");
    expect(gpu.ops().ctx_configure(gpu.ctx, "pdl", "off") == NFN_OK, "configure pdl=off");
  }
  // The attention of other people's code, which only a GPU runs: last, so that a fault
  // there (a sticky CUDA error ends the context) costs only its own checks.
  if (!self_check)
    for (const char* path : {"cudnn", "thunderkittens"})
      for (nfn_dtype dt : {NFN_F32, NFN_BF16}) check_attention_path(cpu, gpu, dt, path);
  if (!self_check) check_cudnn_atomic(cpu, gpu);
  // Which fused cuBLASLt epilogues ran fused over the suite (the unfused forms run too).
  if (!self_check) std::printf("fused epilogues over the suite: %s\n", gpu.query("fused_epilogues").c_str());
  gpu.ops().ctx_destroy(gpu.ctx);
  cpu.ops().ctx_destroy(cpu.ctx);
  std::string also;  // what was left out, and why (the last line is the summary)
  for (const std::string& why : not_run) also += (also.empty() ? " (not run: " : "; ") + why;
  if (!also.empty()) also += ")";
  if (failures)
    std::printf("%d of %d checks failed%s\n", failures, checks, also.c_str());
  else
    std::printf("PASS: %d checks%s\n", checks, also.c_str());
  return failures ? 1 : 0;
}
