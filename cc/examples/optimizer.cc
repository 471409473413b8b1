// Category: optimizer
// Shows: adamw_step_many, two AdamW steps of one parameter group, the gradient clipped to
// norm 1 by the scale the op computes from sum_squares_many's result
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const std::vector<float> param = {0.5f, -0.25f, 1.f, 0.f}, grad = {0.3f, -1.2f, 0.8f, 2.f};
  const size_t n = param.size();
  float *master = example::upload(s, param), *d_grad = example::upload(s, grad);
  float *m = example::upload(s, std::vector<float>(n)), *v = example::upload(s, std::vector<float>(n));
  float* sumsq = example::upload(s, std::vector<float>(1));
  const void* buffers[1] = {d_grad};
  const size_t counts[1] = {n};
  example::check(s, o.sum_squares_many(s.ctx, buffers, counts, 1, NFN_F32, sumsq), "sum_squares_many");
  const nfn_adamw_group group = {master, nullptr, d_grad, m, v, n, 0.1f};
  std::printf("# lr 0.01, betas 0.9 0.95, eps 1e-8, weight decay 0.1, max grad norm 1; per step:\n");
  std::printf("# g = grad * min(1, 1 / |grad|); m = 0.9 m + 0.1 g; v = 0.95 v + 0.05 g^2;\n");
  std::printf("# p -= 0.01 (m / (1 - 0.9^t) / (sqrt(v / (1 - 0.95^t)) + 1e-8) + 0.1 p)\n");
  example::print("param", param);
  example::print("grad", grad);
  for (int step = 1; step <= 2; ++step) {
    example::check(s, o.adamw_step_many(s.ctx, &group, 1, step, 0.01f, 0.9f, 0.95f, 1e-8f, sumsq, 1.f, NFN_F32),
                   "adamw_step_many");
    example::print(step == 1 ? "param_step1" : "param_step2", example::download(s, master, n));
  }
  example::print("m", example::download(s, m, n));
  example::print("v", example::download(s, v, n));
  example::free_all(s, {master, d_grad, m, v, sumsq});
  example::close(&s);
  return 0;
}
