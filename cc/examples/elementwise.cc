// Category: elementwise
// Shows: residual_forward, residual + inp + bias written over the residual stream in place
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 2, C = 3;
  const std::vector<float> residual = example::values(N * C, 1), inp = example::values(N * C, 2);
  const std::vector<float> bias = {0.5f, -0.5f, 2.f};
  float *stream = example::upload(s, residual), *d_inp = example::upload(s, inp), *d_b = example::upload(s, bias);
  example::check(s, o.residual_forward(s.ctx, stream, stream, d_inp, d_b, N, C, NFN_F32), "residual_forward");
  std::printf("# out = residual + inp + bias (bias added to every row); out is the residual's memory\n");
  example::print("residual", residual);
  example::print("inp", inp);
  example::print("bias", bias);
  example::print("out", example::download(s, stream, N * C));
  example::free_all(s, {stream, d_inp, d_b});
  example::close(&s);
  return 0;
}
