// The trainer's bitwise resume needs ops that give the same bits on every run with the same
// thread count: run the reducing ops twice on fresh contexts and compare every bit, with more
// threads than this machine has cores so that they finish in a different order each time.
#include <cstring>
#include <vector>

#include "tests/cc/ops/op_test_util.h"

using namespace nfn_test;

// Everything a training step's reductions touch, from one fresh context.
// deterministic=off is accepted and changes nothing: every CPU kernel repeats bit for bit.
static std::vector<float> run_once(const char* deterministic) {
  nfn_ctx* ctx = nullptr;
  if (nfn_ctx_create(0, &ctx) != NFN_OK || nfn_ctx_configure(ctx, "threads", "5") != NFN_OK ||
      nfn_ctx_configure(ctx, "deterministic", deterministic) != NFN_OK)
    return {};
  const int B = 2, T = 80, C = 32, NH = 2, N = B * T, V = 300;
  std::vector<float> qkv = random_vec(N * 3 * C, 1), out(N * C), lse(B * NH * T), dqkv(N * 3 * C);
  std::vector<float> dout = random_vec(N * C, 2), x = random_vec(N * C, 3), w = random_vec(3 * C * C, 4);
  std::vector<float> wte = random_vec(V * C, 5), dx(N * C), dwte(V * C), losses(N), dw(3 * C * C), db(3 * C);
  std::vector<float> ln(N * C), stats(2 * N), dln(N * C), dlw(C), dlb(C), dxsum(C), dlnsum(C);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 31) % V;
  float loss_sum = 0.f, sumsq = 0.f;
  std::vector<float> grads = random_vec(3 << 16, 6);
  const void* grad_bufs[2] = {grads.data(), dqkv.data()};
  const size_t grad_counts[2] = {grads.size(), dqkv.size()};
  // Grouped-query heads with a window too: their dK and dV sum over each kv head's query heads.
  const int GH = 4, GKV = 2, GD = 16, window = 30;
  std::vector<float> gqkv = random_vec(N * (GH + 2 * GKV) * GD, 7), gout(N * GH * GD), glse(B * GH * T);
  std::vector<float> gdqkv(gqkv.size()), gdout = random_vec(gout.size(), 8);
  bool ok = nfn_attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, NH, NH, C / NH, 0, NFN_F32) == NFN_OK &&
            nfn_attention_backward(ctx, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH,
                                   C / NH, 0, NFN_F32) == NFN_OK &&
            nfn_attention_forward(ctx, gout.data(), glse.data(), gqkv.data(), B, T, GH, GKV, GD, window, NFN_F32) ==
                NFN_OK &&
            nfn_attention_backward(ctx, gdqkv.data(), gdout.data(), gqkv.data(), gout.data(), glse.data(), B, T, GH,
                                   GKV, GD, window, NFN_F32) == NFN_OK &&
            nfn_linear_backward(ctx, x.data(), dw.data(), db.data(), dxsum.data(), dqkv.data(), out.data(), w.data(),
                                nullptr, N, C, 3 * C, 0, NFN_F32) == NFN_OK &&
            nfn_lm_head_cross_entropy(ctx, losses.data(), &loss_sum, dx.data(), dwte.data(), x.data(), wte.data(),
                                      tgt.data(), nullptr, N, C, V, V, 1.f / N, 0.f, NFN_F32) == NFN_OK &&
            nfn_layernorm_forward(ctx, ln.data(), stats.data(), stats.data() + N, x.data(), dlw.data(), nullptr, N, C,
                                  NFN_F32) == NFN_OK &&
            nfn_layernorm_backward(ctx, dln.data(), dlw.data(), dlb.data(), dlnsum.data(), dout.data(), x.data(),
                                   wte.data(), stats.data(), stats.data() + N, N, C, NFN_F32) == NFN_OK &&
            nfn_sum_squares_many(ctx, grad_bufs, grad_counts, 2, NFN_F32, &sumsq) == NFN_OK;
  // The learned scalars' and gates' gradients: scaled_sum over two chunks, gated_add's gate
  // of 12 channels from x into two heads of 16 of dout.
  std::vector<float> dmix(N * C), dscalars(2), dgate_in(N * C), dgate_w(2 * 12), dgate_lam(1);
  const float lam = 0.7f;
  ok = ok &&
       nfn_scaled_sum_backward(ctx, dmix.data(), dln.data(), &dscalars[0], &dscalars[1], dout.data(), x.data(),
                               ln.data(), &lam, &lam, 0.5f, 2.f, N * C, NFN_F32) == NFN_OK &&
       nfn_gated_add_backward(ctx, dgate_in.data(), dgate_w.data(), dgate_lam.data(), dmix.data(), dout.data(),
                              x.data(), w.data(), &lam, ln.data(), N, T, 2, 16, 12, 1, C, C, C, 3.f, NFN_F32) ==
           NFN_OK;
  EXPECT(ok, "ops failed: %s", nfn_ctx_last_error(ctx));
  nfn_ctx_destroy(ctx);
  std::vector<float> all;
  for (const auto* v : {&out, &lse, &dqkv, &gout, &glse, &gdqkv, &dw, &db, &dx, &dwte, &losses, &ln, &dln, &dlw,
                        &dlb, &dxsum, &dlnsum, &dmix, &dscalars, &dgate_in, &dgate_w, &dgate_lam})
    all.insert(all.end(), v->begin(), v->end());
  all.push_back(loss_sum);
  all.push_back(sumsq);
  return all;
}

int main() {
  std::vector<float> a = run_once("on"), b = run_once("off");
  EXPECT(!a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0,
         "two identical runs (deterministic=on, then off) differ in some bit");
  nfn_ctx* ctx = nullptr;
  EXPECT(nfn_ctx_create(0, &ctx) == NFN_OK && nfn_ctx_configure(ctx, "deterministic", "maybe") == NFN_ERR_INVALID_ARGUMENT,
         "configure deterministic=maybe is refused");
  nfn_ctx_destroy(ctx);
  return finish("determinism_test");
}
