// Category: embedding
// Shows: embedding_forward (a token's row plus its position's row) and embedding_backward
// (gradients added into the rows used, twice for a repeated id)
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int B = 1, T = 3, C = 4, V = 5;
  const std::vector<int32_t> tokens = {2, 0, 2};  // id 2 twice
  const std::vector<float> wte = example::values(V * C, 1), wpe = example::values(T * C, 2);
  const std::vector<float> dout = example::values(T * C, 3);
  int32_t* d_tokens = example::upload(s, tokens);
  float *d_wte = example::upload(s, wte), *d_wpe = example::upload(s, wpe), *d_dout = example::upload(s, dout);
  float* out = example::upload(s, std::vector<float>(B * T * C));
  float *dwte = example::upload(s, std::vector<float>(V * C)), *dwpe = example::upload(s, std::vector<float>(T * C));
  example::check(s, o.embedding_forward(s.ctx, out, d_tokens, d_wte, d_wpe, B, T, C, NFN_F32), "embedding_forward");
  example::check(s, o.embedding_backward(s.ctx, dwte, dwpe, d_dout, d_tokens, B, T, C, NFN_F32),
                 "embedding_backward");
  std::printf("# out[t] = wte[tokens[t]] + wpe[t]; dwte[id] = sum of dout rows with that id; dwpe = dout\n");
  example::print("tokens", tokens);
  example::print("wte", wte);
  example::print("wpe", wpe);
  example::print("dout", dout);
  example::print("out", example::download(s, out, B * T * C));
  example::print("dwte", example::download(s, dwte, V * C));
  example::print("dwpe", example::download(s, dwpe, T * C));
  example::free_all(s, {d_tokens, d_wte, d_wpe, d_dout, out, dwte, dwpe});
  example::close(&s);
  return 0;
}
