// Category: softmax
// Shows: softmax_forward over the first V = 3 of each row's 4 columns (the fourth is padding,
// left out however large)
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 2, V = 3, stride = 4;
  const std::vector<float> logits = {1.f, 2.f, 3.f, 100.f, -1.f, 0.f, 0.5f, 100.f};
  float *d_logits = example::upload(s, logits), *probs = example::upload(s, std::vector<float>(N * V));
  example::check(s, o.softmax_forward(s.ctx, probs, d_logits, N, V, stride, NFN_F32), "softmax_forward");
  std::printf("# probs[i, j] = exp(logits[i, j]) / sum over j < 3 of exp(logits[i, j])\n");
  example::print("logits", logits);
  example::print("probs", example::download(s, probs, N * V));
  example::free_all(s, {d_logits, probs});
  example::close(&s);
  return 0;
}
