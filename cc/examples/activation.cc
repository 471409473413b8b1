// Category: activation
// Shows: gelu_forward and gelu_backward, GPT-2's tanh GELU and its derivative
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const std::vector<float> x = {-3.f, -1.f, -0.5f, 0.f, 0.5f, 1.f, 3.f}, dout = example::values(x.size(), 1);
  const size_t n = x.size();
  float *d_x = example::upload(s, x), *d_dout = example::upload(s, dout);
  float *out = example::upload(s, std::vector<float>(n)), *dinp = example::upload(s, std::vector<float>(n));
  example::check(s, o.gelu_forward(s.ctx, out, d_x, n, NFN_F32), "gelu_forward");
  example::check(s, o.gelu_backward(s.ctx, dinp, d_x, d_dout, n, NFN_F32), "gelu_backward");
  std::printf("# gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); dinp = dout * gelu'(x)\n");
  example::print("x", x);
  example::print("dout", dout);
  example::print("gelu", example::download(s, out, n));
  example::print("dinp", example::download(s, dinp, n));
  example::free_all(s, {d_x, d_dout, out, dinp});
  example::close(&s);
  return 0;
}
