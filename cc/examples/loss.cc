// Category: loss
// Shows: lm_head_cross_entropy, the tied LM head with cross-entropy: each row's loss, their sum,
// a masked row (target -1), and the backward's dx and dwte (nothing for wte's padded row)
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 3, C = 4, V = 5, Vp = 6;  // wte has Vp rows; the softmax is over the first V
  const std::vector<int32_t> targets = {1, 4, -1};
  const std::vector<float> x = example::values(N * C, 1), wte = example::values(Vp * C, 2);
  const float grad_scale = 0.5f;  // 1 / the rows not masked
  int32_t* d_targets = example::upload(s, targets);
  float *d_x = example::upload(s, x), *d_wte = example::upload(s, wte);
  float *losses = example::upload(s, std::vector<float>(N)), *loss_sum = example::upload(s, std::vector<float>(1));
  float *dx = example::upload(s, std::vector<float>(N * C)), *dwte = example::upload(s, std::vector<float>(Vp * C));
  example::check(s, o.lm_head_cross_entropy(s.ctx, losses, loss_sum, dx, dwte, d_x, d_wte, d_targets, nullptr, N, C, V, Vp,
                                            grad_scale, 0.f, NFN_F32),
                 "lm_head_cross_entropy");
  std::printf("# logits = x @ wte[:5]^T; losses[i] = -log softmax(logits[i])[targets[i]] (0 where masked);\n");
  std::printf("# dlogits = (softmax - onehot) * 0.5; dx = dlogits @ wte[:5]; dwte[:5] = dlogits^T @ x\n");
  example::print("targets", targets);
  example::print("x", x);
  example::print("wte", wte);
  example::print("losses", example::download(s, losses, N));
  example::print("loss_sum", example::download(s, loss_sum, 1));
  example::print("dx", example::download(s, dx, N * C));
  example::print("dwte", example::download(s, dwte, Vp * C));
  example::free_all(s, {d_targets, d_x, d_wte, losses, loss_sum, dx, dwte});
  example::close(&s);
  return 0;
}
