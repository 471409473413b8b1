// Embedding forward against a naive gather, backward against finite differences.
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

int main() {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK) return 1;
  const int B = 2, T = 5, C = 7, V = 6, maxT = 8;
  std::vector<int32_t> tokens = {1, 3, 3, 0, 5, 5, 5, 2, 1, 3};  // repeats must add up
  std::vector<float> wte = random_vec(V * C, 1), wpe = random_vec(maxT * C, 2);
  std::vector<float> out(B * T * C), w = random_vec(B * T * C, 3);
  auto forward = [&](bool pos) {
    EXPECT(nfn_embedding_forward(ctx, out.data(), tokens.data(), wte.data(), pos ? wpe.data() : nullptr,
                                 B, T, C, NFN_F32) == NFN_OK, "embedding_forward");
  };
  forward(true);
  std::vector<double> want(B * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        want[(b * T + t) * C + c] = static_cast<double>(wte[tokens[b * T + t] * C + c]) + wpe[t * C + c];
  expect_close("embedding_forward", out, want, 1e-7, 1e-7);
  forward(false);
  for (int i = 0; i < B * T * C; ++i) want[i] = wte[tokens[i / C] * C + i % C];
  expect_close("embedding_forward without wpe", out, want, 1e-7, 0);

  // Backward: accumulates into existing gradients, checked against central differences.
  std::vector<float> dwte(V * C, 0.5f), dwpe(maxT * C, -0.25f);
  EXPECT(nfn_embedding_backward(ctx, dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C,
                                NFN_F32) == NFN_OK, "embedding_backward");
  auto loss = [&] { forward(true); return weighted_sum(out, w); };
  std::vector<double> g_wte = numeric_grad(wte, loss), g_wpe = numeric_grad(wpe, loss);
  for (auto& g : g_wte) g += 0.5;
  for (auto& g : g_wpe) g -= 0.25;
  expect_close("embedding_backward dwte", dwte, g_wte, 1e-3, 1e-3);
  expect_close("embedding_backward dwpe", dwpe, g_wpe, 1e-3, 1e-3);

  expect_invalid(ctx, nfn_embedding_forward(ctx, out.data(), tokens.data(), wte.data(), nullptr, B, 0, C, NFN_F32),
                 "embedding_forward", "T=0");
  tokens[3] = -1;
  expect_invalid(ctx, nfn_embedding_backward(ctx, dwte.data(), nullptr, w.data(), tokens.data(), B, T, C, NFN_F32),
                 "embedding_backward", "a negative token");
  EXPECT(nfn_embedding_forward(ctx, out.data(), tokens.data(), wte.data(), nullptr, B, T, C, NFN_BF16) ==
             NFN_ERR_UNSUPPORTED, "bf16 embedding is unsupported on the CPU");
  nfn_ctx_destroy(ctx);
  return finish("embedding_test");
}
