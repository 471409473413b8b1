// Category: norm
// Shows: layernorm_forward (with the mean and 1/std it saves for the backward) and
// rmsnorm_forward, over the rows of a 2 x 5 input
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 2, C = 5;
  const std::vector<float> x = example::values(N * C, 1), weight = example::values(C, 2), bias = example::values(C, 3);
  float *d_x = example::upload(s, x), *d_w = example::upload(s, weight), *d_b = example::upload(s, bias);
  float *ln = example::upload(s, std::vector<float>(N * C)), *rms = example::upload(s, std::vector<float>(N * C));
  float *mean = example::upload(s, std::vector<float>(N)), *rstd = example::upload(s, std::vector<float>(N));
  float* rms_rstd = example::upload(s, std::vector<float>(N));
  example::check(s, o.layernorm_forward(s.ctx, ln, mean, rstd, d_x, d_w, d_b, N, C, NFN_F32), "layernorm_forward");
  example::check(s, o.rmsnorm_forward(s.ctx, rms, rms_rstd, d_x, d_w, N, C, 1e-5f, NFN_F32), "rmsnorm_forward");
  std::printf("# layernorm = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + 1e-5);\n");
  std::printf("# rmsnorm = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + 1e-5)\n");
  example::print("x", x);
  example::print("weight", weight);
  example::print("bias", bias);
  example::print("layernorm", example::download(s, ln, N * C));
  example::print("mean", example::download(s, mean, N));
  example::print("rstd", example::download(s, rstd, N));
  example::print("rmsnorm", example::download(s, rms, N * C));
  example::print("rms_rstd", example::download(s, rms_rstd, N));
  example::free_all(s, {d_x, d_w, d_b, ln, rms, mean, rstd, rms_rstd});
  example::close(&s);
  return 0;
}
