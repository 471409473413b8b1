// The tied LM head with cross-entropy on the CPU, in row chunks: only a (rows, V) block of
// logits exists at a time, and it is turned into dlogits in place for the backward GEMMs.
// Only wte's first V rows are read: the padded rows' logits would not enter the softmax, and
// their gradient is 0 (dwte's padded rows are left as they are). A soft cap (softcap > 0)
// rewrites a row's logits in place before its softmax; the backward keeps the row's slopes.
// Per-row weights scale a row's share of the loss sum and its gradient, not its loss.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/fast_math.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/reduce_math.h"

using nfn::cpu::Gemm;

namespace {

// Rows per chunk: about 2M logits (8 MB), enough rows for the dwte GEMM to run well.
int chunk_rows(int N, int V) { return std::max(1, std::min(N, std::max(64, (1 << 21) / V))); }

// A row's logits soft-capped in place, l = cap tanh(l / cap) (softcap_forward's formula), and,
// where slope is not NULL, each one's derivative 1 - tanh(l / cap)^2, which its gradient is
// multiplied by (kept from the uncapped logit: at saturation 1 - t^2 would cancel).
void cap_row(float* l, int V, float cap, float* slope) {
  for (int j = 0; j < V; ++j) {
    const float u = l[j] / cap;
    if (slope != nullptr) slope[j] = nfn::cpu::tanh_grad(u);
    l[j] = cap * nfn::cpu::precise_tanh(u);
  }
}

}  // namespace

extern "C" {

nfn_status nfn_lm_head_cross_entropy(nfn_ctx* ctx, float* losses, float* loss_sum, void* dx,
                                     void* dwte, const void* x, const void* wte,
                                     const int32_t* targets, const float* weights, int N, int C, int V, int Vp,
                                     float grad_scale, float softcap, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "lm_head_cross_entropy", dtype));
  NFN_REQUIRE(N > 0 && C > 0 && V > 0, "lm_head_cross_entropy: N=%d C=%d V=%d must be positive",
              N, C, V);
  NFN_REQUIRE(Vp >= V, "lm_head_cross_entropy: Vp=%d (wte's rows) is below V=%d", Vp, V);
  NFN_REQUIRE(x && wte && targets, "lm_head_cross_entropy: null x, wte or targets");
  NFN_REQUIRE(dwte == nullptr || dx != nullptr,
              "lm_head_cross_entropy: dwte given without dx (the backward runs only with dx)");
  NFN_REQUIRE(softcap >= 0.f && !std::isinf(softcap),
              "lm_head_cross_entropy: softcap=%g must be 0 (no cap) or positive and finite",
              static_cast<double>(softcap));
  for (int i = 0; i < N; ++i)
    NFN_REQUIRE(targets[i] < V, "lm_head_cross_entropy: target %d at row %d is not below V=%d",
                targets[i], i, V);
  const float* xs = static_cast<const float*>(x);
  const float* w = static_cast<const float*>(wte);
  const int R = ctx->lm_head_rows > 0 ? std::min(N, ctx->lm_head_rows) : chunk_rows(N, V);
  float* logits = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchLogits, static_cast<size_t>(R) * V);
  // In matmul=bf16 mode the tied weight is rounded once here, not once per chunk and GEMM.
  const uint16_t* wte_bf16 = nullptr;
  if (ctx->matmul_bf16) {
    uint16_t* rounded = nfn::cpu::scratch_bf16(ctx, nfn::cpu::kScratchLogits, static_cast<size_t>(V) * C);
    NFN_RETURN_IF_ERROR(nfn_convert(ctx, rounded, NFN_BF16, wte, NFN_F32, static_cast<size_t>(V) * C));
    wte_bf16 = rounded;
  }
  double total = 0.0;
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    // logits (rows,V) = x wte^T, dx = dlogits wte, dwte += dlogits^T x: a linear layer's products.
    const float* xr = xs + static_cast<size_t>(r0) * C;
    Gemm fwd = nfn::cpu::linear_output(logits, xr, w, rows, C, V);
    fwd.B_bf16 = wte_bf16;
    NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "lm_head_cross_entropy", fwd));
    double chunk_total = 0.0;
#pragma omp parallel reduction(+ : chunk_total)
    {
      std::vector<float> slope(softcap > 0.f && dx != nullptr ? V : 0);  // the thread's row of cap slopes
#pragma omp for schedule(static)
      for (int i = 0; i < rows; ++i) {
        float* l = logits + static_cast<size_t>(i) * V;
        const int target = targets[r0 + i];
        if (target < 0) {  // masked: loss 0 and a gradient of exact zeros, whatever its logits
          if (losses != nullptr) losses[r0 + i] = 0.f;
          if (dx != nullptr) std::fill(l, l + V, 0.f);
          continue;
        }
        if (softcap > 0.f) cap_row(l, V, softcap, slope.empty() ? nullptr : slope.data());
        const float m = nfn::cpu::row_max(l, V);
        const float target_logit = l[target];
        for (int j = 0; j < V; ++j) l[j] = nfn::cpu::fast_exp(l[j] - m);  // l now holds e^(logit-m)
        const float sum = nfn::cpu::row_sum(l, V);
        const float loss = m + std::log(sum) - target_logit;
        const float w = weights != nullptr ? weights[r0 + i] : 1.f;
        if (losses != nullptr) losses[r0 + i] = loss;
        chunk_total += static_cast<double>(w) * loss;
        if (dx == nullptr) continue;
        // dlogits = (softmax - onehot) * grad_scale * w
        const float gs = grad_scale * w;
        const float k = gs / sum;
        for (int j = 0; j < V; ++j) l[j] *= k;
        l[target] -= gs;
        for (size_t j = 0; j < slope.size(); ++j) l[j] *= slope[j];  // through the cap to the raw logits
      }
    }
    total += chunk_total;
    if (dx == nullptr) continue;
    Gemm back_x = nfn::cpu::linear_input_grad(static_cast<float*>(dx) + static_cast<size_t>(r0) * C, logits, w,
                                              rows, C, V);
    back_x.B_bf16 = wte_bf16;
    NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "lm_head_cross_entropy", back_x));
    if (dwte == nullptr) continue;
    const Gemm back_w = nfn::cpu::linear_weight_grad(static_cast<float*>(dwte), xr, logits, rows, C, V);
    NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "lm_head_cross_entropy", back_w));
  }
  if (loss_sum != nullptr) *loss_sum += static_cast<float>(total);
  return NFN_OK;
}

}  // extern "C"
