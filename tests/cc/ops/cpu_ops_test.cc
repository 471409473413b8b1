// The CPU op library against values computed here independently (double sums, bit patterns).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cc/ops/cpu/context.h"
#include "cc/ops/nfn_tile_ops.h"
#include "tests/cc/expect.h"
#include "tests/cc/ops/op_test_util.h"

using nfn_test::bits_of;

static void test_bf16_rounding() {
  using nfn::cpu::bf16_to_f32;
  using nfn::cpu::f32_to_bf16;
  EXPECT(f32_to_bf16(1.0f) == 0x3f80, "1.0 -> %04x", f32_to_bf16(1.0f));
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT(f32_to_bf16(1.00390625f) == 0x3f80, "tie to even gave %04x", f32_to_bf16(1.00390625f));
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT(f32_to_bf16(1.01171875f) == 0x3f82, "tie to even up gave %04x", f32_to_bf16(1.01171875f));
  EXPECT(f32_to_bf16(-2.5f) == 0xc020, "-2.5 -> %04x", f32_to_bf16(-2.5f));
  uint16_t nan = f32_to_bf16(std::nanf(""));
  EXPECT((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0, "NaN must stay NaN, got %04x", nan);
  EXPECT(bits_of(bf16_to_f32(0x4049)) == 0x40490000u, "widening is a shift");
}

static void test_memory_ops(nfn_ctx* ctx) {
  void* p = nullptr;
  EXPECT(nfn_alloc(ctx, 1000 * sizeof(float), &p) == NFN_OK && p != nullptr, "alloc");
  EXPECT(reinterpret_cast<uintptr_t>(p) % 64 == 0, "alloc must be 64-byte aligned");
  EXPECT(nfn_fill(ctx, p, NFN_F32, 3.25f, 1000) == NFN_OK, "fill f32");
  const float* f = static_cast<const float*>(p);
  for (int i = 0; i < 1000; ++i) EXPECT(f[i] == 3.25f, "fill f32 [%d]=%g", i, f[i]);
  EXPECT(nfn_fill(ctx, p, NFN_BF16, -0.5f, 7) == NFN_OK, "fill bf16");
  const uint16_t* h = static_cast<const uint16_t*>(p);
  for (int i = 0; i < 7; ++i) EXPECT(h[i] == 0xbf00, "fill bf16 [%d]=%04x", i, h[i]);
  std::vector<float> src(10), dst(10, 0.f);
  for (int i = 0; i < 10; ++i) src[i] = 0.1f * i - 0.3f;
  EXPECT(nfn_copy(ctx, dst.data(), src.data(), 40, NFN_HOST_TO_DEVICE) == NFN_OK, "copy");
  EXPECT(dst == src, "copy must move every byte");
  EXPECT(nfn_fill(ctx, p, static_cast<nfn_dtype>(9), 0.f, 1) == NFN_ERR_INVALID_ARGUMENT,
         "unknown dtype must be rejected");
  EXPECT(std::string(nfn_ctx_last_error(ctx)).find("unknown dtype 9") != std::string::npos,
         "last error names the problem: %s", nfn_ctx_last_error(ctx));
  EXPECT(nfn_free(ctx, p) == NFN_OK, "free");
}

static void test_sum_squares(nfn_ctx* ctx) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<std::vector<float>> bufs = {std::vector<float>(1), std::vector<float>(1 << 17),
                                          std::vector<float>(333)};
  double expect = 0.0;
  for (auto& b : bufs)
    for (auto& v : b) {
      v = dist(rng);
      expect += static_cast<double>(v) * v;
    }
  const void* ptrs[3] = {bufs[0].data(), bufs[1].data(), bufs[2].data()};
  size_t counts[3] = {bufs[0].size(), bufs[1].size(), bufs[2].size()};
  float out = -1.f;
  EXPECT(nfn_sum_squares_many(ctx, ptrs, counts, 3, NFN_F32, &out) == NFN_OK, "sumsq f32");
  EXPECT(std::fabs(out - expect) <= 1e-6 * expect, "sumsq f32 %g vs %g", out, expect);

  std::vector<uint16_t> hb(5000);
  double expect_bf = 0.0;
  for (auto& v : hb) {
    v = nfn::cpu::f32_to_bf16(dist(rng));
    double x = nfn::cpu::bf16_to_f32(v);
    expect_bf += x * x;
  }
  const void* p1[1] = {hb.data()};
  size_t c1[1] = {hb.size()};
  EXPECT(nfn_sum_squares_many(ctx, p1, c1, 1, NFN_BF16, &out) == NFN_OK, "sumsq bf16");
  EXPECT(std::fabs(out - expect_bf) <= 1e-6 * expect_bf, "sumsq bf16 %g vs %g", out, expect_bf);
  {  // a null buffer is refused where it has elements, and ignored where it has none
    const void* with_null[2] = {ptrs[0], nullptr};
    const size_t null_counts[2] = {counts[0], 5}, empty_counts[2] = {counts[0], 0};
    EXPECT(nfn_sum_squares_many(ctx, with_null, null_counts, 2, NFN_F32, &out) == NFN_ERR_INVALID_ARGUMENT,
           "sumsq: a null buffer with elements");
    EXPECT(nfn_sum_squares_many(ctx, with_null, empty_counts, 2, NFN_F32, &out) == NFN_OK, "sumsq: an empty null");
    EXPECT(nfn_ctx_configure(nullptr, "matmul", "f32") == NFN_ERR_INVALID_ARGUMENT, "configure without a context");
    // Every op refuses a null context, as the CUDA library does (tests/cuda check_contract).
    void* q = nullptr;
    nfn_event* e = nullptr;
    float f[8] = {};
    EXPECT(nfn_alloc(nullptr, 8, &q) == NFN_ERR_INVALID_ARGUMENT && nfn_synchronize(nullptr) == NFN_ERR_INVALID_ARGUMENT &&
               nfn_event_create(nullptr, NFN_EVENT_DEFAULT, &e) == NFN_ERR_INVALID_ARGUMENT &&
               nfn_graph_begin(nullptr) == NFN_ERR_INVALID_ARGUMENT &&
               nfn_gelu_forward(nullptr, f, f, 8, NFN_F32) == NFN_ERR_INVALID_ARGUMENT &&
               nfn_linear_forward(nullptr, f, nullptr, f, f, nullptr, nullptr, 2, 2, 2, NFN_EPILOGUE_NONE, NFN_F32) ==
                   NFN_ERR_INVALID_ARGUMENT &&
               nfn_sum_squares_many(nullptr, ptrs, counts, 1, NFN_F32, &out) == NFN_ERR_INVALID_ARGUMENT,
           "ops without a context are refused");
  }
  EXPECT(nfn_sum_squares_many(ctx, ptrs, counts, 0, NFN_F32, &out) == NFN_OK && out == 0.f,
         "no buffers sum to zero");
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) {
    std::printf("FAIL: nfn_ctx_create\n");
    return 1;
  }
  EXPECT(nfn_abi_version() == NFN_ABI_VERSION, "abi version");
  EXPECT(std::string(nfn_backend_name()) == "cpu", "backend name");
  test_bf16_rounding();
  test_memory_ops(ctx);
  test_sum_squares(ctx);
  nfn_ctx_destroy(ctx);
  return nfn_test::finish("cpu_ops_test");
}
