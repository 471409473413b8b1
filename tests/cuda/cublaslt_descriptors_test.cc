// cuBLASLt's descriptors for every kind of GEMM the CUDA library issues, built by the real
// libcublasLt (from the nvidia-cublas wheel) exactly as cuda/ops/cublaslt.cc builds them before
// a product: operation, epilogue and its pointers, layouts, preference. That needs no GPU, so
// an attribute cuBLASLt does not accept (a wrong size or type, an epilogue this version lacks)
// shows up here rather than on the first GPU run (an AUX_LD passed as int32 instead of the
// int64 cuBLASLt wants fails the DGELU and GELU cases). cuBLASLt accepts
// any layout at this stage; whether a kernel exists for the shape, and the product itself,
// still need a GPU.
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/ops/cublaslt.h"
#include "tests/cc/expect.h"

using nfn::cuda::GemmArgs;
using nfn::cuda::GemmEpilogue;

namespace {

// Device addresses are only recorded in descriptors, never followed: 256-byte aligned stand-ins.
void* at(uintptr_t slot) { return reinterpret_cast<void*>(slot << 20); }

constexpr int N = 16384, C = 768, Vp = 50304;  // GPT-2 124M at B=16, T=1024

// A bf16 product D (m,n) = op(A) op(B) on stand-in addresses.
GemmArgs product(bool trans_a, bool trans_b, int m, int n, int k, int lda, int ldb, int ldd) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.m = m, g.n = n, g.k = k;
  g.a = at(1), g.lda = lda;
  g.b = at(2), g.ldb = ldb;
  g.d = at(3), g.ldd = ldd;
  g.ab = g.d_dtype = NFN_BF16;
  return g;
}

// A linear layer's GEMMs as linear.cu lays them out (row-major (N,IC) @ (OC,IC)^T, column-major
// here): the forward, the input gradient and the weight gradient (accumulated).
GemmArgs forward(int IC, int OC) { return product(true, false, OC, N, IC, IC, IC, OC); }
GemmArgs input_grad(int IC, int OC) { return product(false, false, IC, N, OC, IC, OC, IC); }
GemmArgs weight_grad(int IC, int OC) {
  GemmArgs g = product(false, true, IC, OC, N, IC, OC, IC);
  g.beta = 1.f;
  return g;
}

}  // namespace

int main() {
  nfn_ctx ctx;
  struct Case {
    const char* what;
    GemmArgs g;
  };
  GemmArgs plain_f32 = forward(C, 3 * C);
  plain_f32.ab = plain_f32.d_dtype = NFN_F32;
  GemmArgs bias = forward(C, 3 * C);
  bias.epilogue = GemmEpilogue::bias, bias.bias = at(4);
  GemmArgs residual = forward(C, C);  // the projection onto the residual stream, in place
  residual.epilogue = GemmEpilogue::bias, residual.bias = at(4), residual.beta = 1.f;
  GemmArgs residual_apart = residual;  // into another buffer: C is not D
  residual_apart.c = at(5);
  GemmArgs gelu = forward(C, 4 * C);
  gelu.epilogue = GemmEpilogue::gelu_aux_bias, gelu.bias = at(4), gelu.aux = at(5);
  GemmArgs dgelu = input_grad(4 * C, C);
  dgelu.epilogue = GemmEpilogue::dgelu, dgelu.aux = at(5);
  GemmArgs dgelu_bgrad = dgelu;  // fcproj's, with fc's bias gradient written to bias
  dgelu_bgrad.epilogue = GemmEpilogue::dgelu_bgrad, dgelu_bgrad.bias = at(4);
  GemmArgs weight = weight_grad(C, 4 * C);
  GemmArgs accumulate = input_grad(C, 3 * C);
  accumulate.beta = 1.f;
  // The LM head over one chunk of all N rows (softmax_loss.cu): logits (Vp, N) = wte (C, Vp)^T
  // @ x (C, N); dx (C, N) = wte (C, Vp) @ dlogits (Vp, N); dwte (C, Vp) += x (C, N) @ dlogits^T.
  GemmArgs logits = product(true, false, Vp, N, C, C, C, Vp);
  GemmArgs lm_dx = product(false, false, C, N, Vp, C, Vp, C);
  GemmArgs lm_dwte = product(false, true, C, Vp, N, C, Vp, C);
  lm_dwte.beta = 1.f;
  const Case cases[] = {
      {"f32 forward", plain_f32},
      {"bf16 forward + bias", bias},
      {"bf16 projection + bias onto the residual, in place", residual},
      {"bf16 projection + bias onto the residual, into another buffer", residual_apart},
      {"bf16 forward + bias + GELU (GELU_AUX_BIAS)", gelu},
      {"bf16 input gradient through the GELU (DGELU)", dgelu},
      {"bf16 input gradient through the GELU, with the bias gradient (DGELU_BGRAD)", dgelu_bgrad},
      {"bf16 weight gradient, accumulated", weight},
      {"bf16 input gradient, accumulated", accumulate},
      {"LM head logits", logits},
      {"LM head dx", lm_dx},
      {"LM head dwte, accumulated", lm_dwte},
  };
  for (const Case& c : cases) {
    const nfn_status s = nfn::cuda::check_gemm_descriptors(&ctx, "gemm", c.g);
    if (s == NFN_ERR_UNSUPPORTED && ctx.last_error.find("without cuBLASLt headers") != std::string::npos) {
      std::printf("SKIP: %s\n", ctx.last_error.c_str());
      return 0;
    }
    EXPECT(s == NFN_OK, "%s: %s", c.what, ctx.last_error.c_str());
  }
  return nfn_test::finish("cublaslt_descriptors_test");
}
