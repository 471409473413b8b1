// convert and widen_tokens against bit patterns and values computed here.
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

// Reference f32 -> bf16, round to nearest even, written independently of the library.
static uint16_t ref_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t lower = b & 0xffffu, upper = b >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

static void test_convert(nfn_ctx* ctx) {
  std::vector<float> src = random_vec(100000, 1, 3.f);
  src[0] = 1.00390625f;  // a tie: stays 1.0
  std::vector<uint16_t> half(src.size());
  EXPECT(nfn_convert(ctx, half.data(), NFN_BF16, src.data(), NFN_F32, src.size()) == NFN_OK, "f32->bf16");
  int bad = 0;
  for (size_t i = 0; i < src.size(); ++i) bad += half[i] != ref_bf16(src[i]);
  EXPECT(bad == 0, "f32->bf16: %d elements differ from round-to-nearest-even", bad);
  std::vector<float> back(src.size());
  EXPECT(nfn_convert(ctx, back.data(), NFN_F32, half.data(), NFN_BF16, src.size()) == NFN_OK, "bf16->f32");
  for (size_t i = 0; i < 100; ++i) {
    uint32_t b;
    std::memcpy(&b, &back[i], 4);
    EXPECT(b == static_cast<uint32_t>(half[i]) << 16, "bf16->f32 [%zu] is not a shift", i);
  }
  std::vector<float> same(src.size());
  EXPECT(nfn_convert(ctx, same.data(), NFN_F32, src.data(), NFN_F32, src.size()) == NFN_OK &&
             same == src, "f32->f32 copies");
  expect_invalid(ctx, nfn_convert(ctx, same.data(), static_cast<nfn_dtype>(5), src.data(), NFN_F32, 3),
                 "convert", "unknown dtype");
  expect_invalid(ctx, nfn_convert(ctx, nullptr, NFN_F32, src.data(), NFN_F32, 3), "convert", "null dst");
}

static void test_widen_tokens(nfn_ctx* ctx) {
  std::vector<uint16_t> src = {0, 1, 50256, 65535};
  std::vector<int32_t> dst(4, -1);
  EXPECT(nfn_widen_tokens(ctx, dst.data(), src.data(), 4) == NFN_OK, "widen");
  EXPECT(dst[2] == 50256 && dst[3] == 65535 && dst[0] == 0, "widen keeps values unsigned");
  expect_invalid(ctx, nfn_widen_tokens(ctx, nullptr, src.data(), 4), "widen_tokens", "null dst");
}

static void test_alloc_host(nfn_ctx* ctx) {
  void* p = nullptr;
  EXPECT(nfn_alloc_host(ctx, 1000, &p) == NFN_OK && p != nullptr && reinterpret_cast<uintptr_t>(p) % 64 == 0,
         "alloc_host: 64-byte aligned host memory");
  std::vector<uint8_t> pattern(1000);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7);
  std::memcpy(p, pattern.data(), pattern.size());  // writable host memory
  void* dev = nullptr;
  std::vector<uint8_t> back(1000);
  EXPECT(nfn_alloc(ctx, 1000, &dev) == NFN_OK && nfn_copy(ctx, dev, p, 1000, NFN_HOST_TO_DEVICE) == NFN_OK &&
             nfn_copy(ctx, back.data(), dev, 1000, NFN_DEVICE_TO_HOST) == NFN_OK && back == pattern,
         "a copy from alloc_host memory");
  EXPECT(nfn_free(ctx, dev) == NFN_OK && nfn_free_host(ctx, p) == NFN_OK, "free_host");
  expect_invalid(ctx, nfn_alloc_host(ctx, 8, nullptr), "alloc_host", "null output pointer");
  // Sizes whose rounding up to 64 bytes would wrap to a tiny block are refused, not granted.
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - 62, SIZE_MAX / 2 + 2}) {
    void* q = &p;
    EXPECT(nfn_alloc(ctx, bytes, &q) == NFN_ERR_OUT_OF_MEMORY && q == nullptr, "alloc(%zu) must fail", bytes);
    EXPECT(nfn_alloc_host(ctx, bytes, &q) == NFN_ERR_OUT_OF_MEMORY, "alloc_host(%zu) must fail", bytes);
  }
}

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  test_alloc_host(ctx);
  test_convert(ctx);
  test_widen_tokens(ctx);
  nfn_ctx_destroy(ctx);
  return finish("memory_ops_test");
}
