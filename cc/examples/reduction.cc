// Category: reduction
// Shows: sum_squares_many, the sum of squares over several buffers in one call (the global
// gradient norm's square)
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const std::vector<float> a = {3.f, 4.f, -1.f}, b = example::values(4, 1);
  float *d_a = example::upload(s, a), *d_b = example::upload(s, b), *sum = example::upload(s, std::vector<float>(1));
  const void* buffers[2] = {d_a, d_b};
  const size_t counts[2] = {a.size(), b.size()};
  example::check(s, o.sum_squares_many(s.ctx, buffers, counts, 2, NFN_F32, sum), "sum_squares_many");
  std::printf("# sum_squares = sum of a^2 + sum of b^2\n");
  example::print("a", a);
  example::print("b", b);
  example::print("sum_squares", example::download(s, sum, 1));
  example::free_all(s, {d_a, d_b, sum});
  example::close(&s);
  return 0;
}
