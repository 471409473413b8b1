// Category: linear
// Shows: linear_forward with a bias and the GELU epilogue (the pre-activation kept in aux),
// then linear_backward's input, weight and bias gradients
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 2, IC = 3, OC = 4;
  const std::vector<float> inp = example::values(N * IC, 1), weight = example::values(OC * IC, 2);
  const std::vector<float> bias = example::values(OC, 3), dout = example::values(N * OC, 4);
  float *d_inp = example::upload(s, inp), *d_w = example::upload(s, weight), *d_b = example::upload(s, bias);
  float *d_dout = example::upload(s, dout), *out = example::upload(s, std::vector<float>(N * OC));
  float* pre = example::upload(s, std::vector<float>(N * OC));
  float *dinp = example::upload(s, std::vector<float>(N * IC)), *dw = example::upload(s, std::vector<float>(OC * IC));
  float* db = example::upload(s, std::vector<float>(OC));
  example::check(s, o.linear_forward(s.ctx, out, pre, d_inp, d_w, d_b, nullptr, N, IC, OC, NFN_EPILOGUE_GELU, NFN_F32),
                 "linear_forward");
  example::check(s, o.linear_backward(s.ctx, dinp, dw, db, nullptr, d_dout, d_inp, d_w, nullptr, N, IC, OC, 0, NFN_F32),
                 "linear_backward");
  std::printf("# pre = inp @ weight^T + bias, out = gelu(pre); dinp = dout @ weight,\n");
  std::printf("# dweight = dout^T @ inp, dbias = column sums of dout\n");
  example::print("inp", inp);
  example::print("weight", weight);
  example::print("bias", bias);
  example::print("dout", dout);
  example::print("pre", example::download(s, pre, N * OC));
  example::print("out", example::download(s, out, N * OC));
  example::print("dinp", example::download(s, dinp, N * IC));
  example::print("dweight", example::download(s, dw, OC * IC));
  example::print("dbias", example::download(s, db, OC));
  example::free_all(s, {d_inp, d_w, d_b, d_dout, out, pre, dinp, dw, db});
  example::close(&s);
  return 0;
}
