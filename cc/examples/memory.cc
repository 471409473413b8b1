// Category: memory
// Shows: alloc, copy both ways, fill, convert f32 -> bf16 -> f32 (round to nearest even) and
// widen_tokens (uint16 token ids to int32)
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one (1.0); 1 + 3 * 2^-8
  // rounds up to the even 1 + 2^-6.
  const std::vector<float> src = {1.0f, -2.5f, 3.14159265f, 1e-3f, 1.00390625f, 1.01171875f, 65504.f};
  const size_t n = src.size();
  float* x = example::upload(s, src);
  void *half = nullptr, *back = nullptr, *filled = nullptr;
  example::check(s, o.alloc(s.ctx, n * 2, &half), "alloc");
  example::check(s, o.alloc(s.ctx, n * 4, &back), "alloc");
  example::check(s, o.alloc(s.ctx, n * 4, &filled), "alloc");
  example::check(s, o.convert(s.ctx, half, NFN_BF16, x, NFN_F32, n), "convert");
  example::check(s, o.convert(s.ctx, back, NFN_F32, half, NFN_BF16, n), "convert");
  example::check(s, o.fill(s.ctx, filled, NFN_F32, 0.25f, n), "fill");
  std::printf("# convert: f32 -> bf16 -> f32 keeps 8 significant bits; fill: every element 0.25\n");
  example::print("src", src);
  example::print("bf16_roundtrip", example::download(s, back, n));
  example::print("filled", example::download(s, filled, n));

  const std::vector<uint16_t> ids = {0, 1, 50256, 65535};
  uint16_t* ids16 = example::upload(s, ids);
  void* ids32 = nullptr;
  example::check(s, o.alloc(s.ctx, ids.size() * 4, &ids32), "alloc");
  example::check(s, o.widen_tokens(s.ctx, static_cast<int32_t*>(ids32), ids16, ids.size()), "widen_tokens");
  std::printf("# widen_tokens: uint16 ids as int32\n");
  example::print("ids", std::vector<int32_t>(ids.begin(), ids.end()));
  example::print("widened", example::download<int32_t>(s, ids32, ids.size()));
  example::free_all(s, {x, half, back, filled, ids16, ids32});
  example::close(&s);
  return 0;
}
