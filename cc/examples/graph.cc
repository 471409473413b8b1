// Category: graph
// Shows: graph_begin, graph_end, graph_launch, graph_free: a step (x += inp) issued once, then
// recorded and replayed three times; a library without graphs (the CPU one) says why, and the
// step runs three more times directly, to the same result
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int N = 1, C = 4;
  const std::vector<float> inp = {1.f, 2.f, 3.f, 4.f};
  float *x = example::upload(s, std::vector<float>(N * C)), *d_inp = example::upload(s, inp);
  auto step = [&] {
    example::check(s, o.residual_forward(s.ctx, x, x, d_inp, nullptr, N, C, NFN_F32), "residual_forward");
  };
  step();  // once outside a recording, as the graph rules ask (first-use set-up happens here)
  int recorded = 0;
  if (o.graph_begin(s.ctx) == NFN_OK) {
    step();
    nfn_graph* graph = nullptr;
    example::check(s, o.graph_end(s.ctx, &graph), "graph_end");
    for (int i = 0; i < 3; ++i) example::check(s, o.graph_launch(s.ctx, graph), "graph_launch");
    example::check(s, o.graph_free(s.ctx, graph), "graph_free");
    recorded = 1;
  } else {
    std::printf("# no graph: %s\n", o.ctx_last_error(s.ctx));
    for (int i = 0; i < 3; ++i) step();
  }
  std::printf("# x starts at 0 and gets inp four times: once, then three times replayed (or run again)\n");
  example::print("inp", inp);
  example::print("recorded", std::vector<int32_t>{recorded});
  example::print("x", example::download(s, x, N * C));
  example::free_all(s, {x, d_inp});
  example::close(&s);
  return 0;
}
