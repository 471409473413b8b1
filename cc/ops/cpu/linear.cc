// Linear layers on the CPU: the GEMMs go to gemm.h (OpenBLAS for f32, oneDNN for bf16), the
// epilogues run here.
#include <cstring>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gelu.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/cpu/row_reduce.h"

using nfn::cpu::Gemm;

extern "C" {

nfn_status nfn_linear_forward(nfn_ctx* ctx, void* out, void* aux, const void* inp,
                              const void* weight, const void* bias, const void* residual, int N,
                              int IC, int OC, nfn_epilogue epilogue, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "linear_forward", dtype));
  NFN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_forward: N=%d IC=%d OC=%d must be positive", N,
              IC, OC);
  NFN_REQUIRE(out && inp && weight, "linear_forward: null out, inp or weight");
  NFN_REQUIRE(epilogue == NFN_EPILOGUE_NONE || epilogue == NFN_EPILOGUE_GELU,
              "linear_forward: unknown epilogue %d", static_cast<int>(epilogue));
  const bool gelu = epilogue == NFN_EPILOGUE_GELU;
  NFN_REQUIRE(gelu == (aux != nullptr), "linear_forward: aux must be given exactly when the epilogue is GELU");
  NFN_REQUIRE(aux != out, "linear_forward: aux must not alias out");
  NFN_REQUIRE(!(gelu && residual), "linear_forward: a residual cannot follow the GELU epilogue");
  const size_t n = static_cast<size_t>(N) * OC;
  if (residual != nullptr && residual != out)  // out starts as the residual; the GEMM adds to it
    std::memcpy(out, residual, n * sizeof(float));
  Gemm g = nfn::cpu::linear_output(static_cast<float*>(gelu ? aux : out), static_cast<const float*>(inp),
                                    static_cast<const float*>(weight), N, IC, OC);
  g.bias = static_cast<const float*>(bias);
  g.accumulate = residual != nullptr;
  NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "linear_forward", g));
  if (gelu) {
    const float* pre = static_cast<const float*>(aux);
    float* y = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) y[i] = nfn::cpu::gelu(pre[i]);
  }
  return NFN_OK;
}

nfn_status nfn_linear_backward(nfn_ctx* ctx, void* dinp, void* dweight, void* dbias,
                               void* dinp_colsum, const void* dout, const void* inp,
                               const void* weight, const void* gelu_pre, int N, int IC, int OC,
                               int accumulate_dinp, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, "linear_backward", dtype));
  NFN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_backward: N=%d IC=%d OC=%d must be positive", N,
              IC, OC);
  NFN_REQUIRE(dout != nullptr, "linear_backward: null dout");
  NFN_REQUIRE(dinp == nullptr || weight != nullptr, "linear_backward: dinp needs weight");
  NFN_REQUIRE(dweight == nullptr || inp != nullptr, "linear_backward: dweight needs inp");
  NFN_REQUIRE(gelu_pre == nullptr || (dinp != nullptr && accumulate_dinp == 0),
              "linear_backward: gelu_pre needs dinp and no accumulate_dinp");
  NFN_REQUIRE(dinp_colsum == nullptr || dinp != nullptr, "linear_backward: dinp_colsum needs dinp");
  const float* g_out = static_cast<const float*>(dout);
  if (dinp != nullptr) {
    Gemm g = nfn::cpu::linear_input_grad(static_cast<float*>(dinp), g_out, static_cast<const float*>(weight), N,
                                         IC, OC);
    g.accumulate = accumulate_dinp != 0;
    NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "linear_backward", g));
    if (gelu_pre != nullptr)  // through the GELU: exactly what gelu_backward computes
      NFN_RETURN_IF_ERROR(nfn_gelu_backward(ctx, dinp, gelu_pre, dinp, static_cast<size_t>(N) * IC, dtype));
  }
  if (dweight != nullptr)
    NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, "linear_backward",
                                       nfn::cpu::linear_weight_grad(static_cast<float*>(dweight),
                                                                    static_cast<const float*>(inp), g_out, N, IC, OC)));
  if (dbias != nullptr) nfn::cpu::add_column_sums(static_cast<float*>(dbias), g_out, N, OC);
  if (dinp_colsum != nullptr)
    nfn::cpu::add_column_sums(static_cast<float*>(dinp_colsum), static_cast<const float*>(dinp), N, IC);
  return NFN_OK;
}

}  // extern "C"
