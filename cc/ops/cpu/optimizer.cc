// AdamW over many parameter groups on the CPU, with the global-norm clip scale computed
// here from the sum of squares (as the device would, without a host round trip).
#include <cmath>

#include "cc/ops/cpu/check.h"

namespace {

// One group; Grad/Param are float or uint16_t (bf16 storage).
template <typename Grad, typename Param>
void adamw_group(const nfn_adamw_group& grp, float lr, float b1, float b2, float eps,
                 float bc1, float bc2, float scale) {
  const Grad* grad = static_cast<const Grad*>(grp.grad);
  Param* param = static_cast<Param*>(grp.param);
  const long n = static_cast<long>(grp.n);
#pragma omp parallel for schedule(static) if (n > 16384)
  for (long i = 0; i < n; ++i) {
    float g;
    if constexpr (sizeof(Grad) == 2) g = nfn::cpu::bf16_to_f32(grad[i]); else g = grad[i];
    g *= scale;
    const float m = b1 * grp.m[i] + (1.f - b1) * g;
    const float v = b2 * grp.v[i] + (1.f - b2) * g * g;
    grp.m[i] = m;
    grp.v[i] = v;
    float p = grp.master[i];
    p -= lr * ((m / bc1) / (std::sqrt(v / bc2) + eps) + grp.weight_decay * p);
    grp.master[i] = p;
    if (param != nullptr) {
      if constexpr (sizeof(Param) == 2) param[i] = nfn::cpu::f32_to_bf16(p); else param[i] = p;
    }
  }
}

}  // namespace

extern "C" {

nfn_status nfn_adamw_step_many(nfn_ctx* ctx, const nfn_adamw_group* host_groups, int ngroups,
                               int step, float lr, float beta1, float beta2, float eps,
                               const float* grad_sumsq, float max_grad_norm, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_storage_dtype(ctx, "adamw_step_many", dtype));
  NFN_REQUIRE(ngroups >= 0 && (ngroups == 0 || host_groups != nullptr),
              "adamw_step_many: ngroups=%d with null groups", ngroups);
  NFN_REQUIRE(step >= 1, "adamw_step_many: step=%d must be at least 1", step);
  NFN_REQUIRE(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f,
              "adamw_step_many: betas (%g, %g) must lie in [0, 1)", beta1, beta2);
  // eps 0 would make a parameter whose gradient has always been 0 NaN (0 / 0).
  NFN_REQUIRE(std::isfinite(lr) && eps > 0.f && std::isfinite(eps), "adamw_step_many: lr=%g eps=%g are invalid "
              "(eps must be positive)", lr, eps);
  NFN_REQUIRE(max_grad_norm <= 0.f || grad_sumsq != nullptr,
              "adamw_step_many: clipping needs grad_sumsq");
  for (int k = 0; k < ngroups; ++k) {
    const nfn_adamw_group& g = host_groups[k];
    NFN_REQUIRE(g.n == 0 || (g.master && g.grad && g.m && g.v),
                "adamw_step_many: group %d has a null master, grad, m or v", k);
  }
  float scale = 1.f;
  if (max_grad_norm > 0.f) {
    const float norm = std::sqrt(*grad_sumsq);
    if (norm > max_grad_norm) scale = max_grad_norm / norm;
  }
  const float bc1 = 1.f - std::pow(beta1, static_cast<float>(step));
  const float bc2 = 1.f - std::pow(beta2, static_cast<float>(step));
  for (int k = 0; k < ngroups; ++k) {
    if (dtype == NFN_F32)
      adamw_group<float, float>(host_groups[k], lr, beta1, beta2, eps, bc1, bc2, scale);
    else
      adamw_group<uint16_t, uint16_t>(host_groups[k], lr, beta1, beta2, eps, bc1, bc2, scale);
  }
  return NFN_OK;
}

}  // extern "C"
