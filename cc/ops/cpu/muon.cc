// Muon over many matrix groups on the CPU: momentum, Polar Express orthogonalization through
// gemm.h's products, then the shape-scaled, weight-decayed step (nfn_ops.def has the math).
#include <algorithm>
#include <cmath>
#include <string>

#include "cc/ops/cpu/check.h"
#include "cc/ops/cpu/gemm.h"
#include "cc/ops/muon_args.h"
#include "cc/util/polar_express.h"

namespace {

using nfn::cpu::Gemm;

// The GEMM operands' precision: bf16 storage rounds them to bf16 (f32 accumulation).
struct Round {
  bool bf16;
  float operator()(float x) const { return bf16 ? nfn::cpu::bf16_to_f32(nfn::cpu::f32_to_bf16(x)) : x; }
};

// One group's matrices in the op's scratch: X (rows, cols), the Gram matrix A, the
// polynomial P = b A + c A^2 (s, s each, s the smaller side) and a product T.
struct Work {
  int64_t rows, cols, s;
  bool tall;  // rows > cols: A = X^T X and X P, so the Gram matrix is the smaller one
  float *x, *a, *p, *t;
};

Work work_for(nfn_ctx* ctx, int rows, int cols) {
  Work w{rows, cols, std::min(rows, cols), rows > cols, nullptr, nullptr, nullptr, nullptr};
  const size_t n = static_cast<size_t>(rows) * cols, ss = static_cast<size_t>(w.s) * w.s;
  w.x = nfn::cpu::scratch_floats(ctx, nfn::cpu::kScratchMuon, 2 * n + 3 * ss);
  w.a = w.x + n;
  w.p = w.a + ss;
  w.t = w.p + ss;  // n or ss floats
  return w;
}

// m = lerp(m, g, 1 - beta); X = nesterov ? lerp(g, m, beta) : m, then X /= 1.01 ||X|| + 1e-6.
template <typename Grad>
void momentum_into_x(const nfn_muon_group& grp, const Work& w, float beta, bool nesterov, Round rnd) {
  const Grad* grad = static_cast<const Grad*>(grp.grad);
  const long n = static_cast<long>(w.rows * w.cols);
#pragma omp parallel for schedule(static) if (n > 16384)
  for (long i = 0; i < n; ++i) {
    float g;
    if constexpr (sizeof(Grad) == 2) g = nfn::cpu::bf16_to_f32(grad[i]); else g = grad[i];
    const float m = grp.momentum[i] + (1.f - beta) * (g - grp.momentum[i]);
    grp.momentum[i] = m;
    w.x[i] = rnd(nesterov ? g + beta * (m - g) : m);
  }
  double ss = 0;  // in index order, so the step repeats bit for bit on any thread count
  for (long i = 0; i < n; ++i) ss += static_cast<double>(w.x[i]) * w.x[i];
  const float denom = std::sqrt(static_cast<float>(ss)) * 1.01f + 1e-6f;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (long i = 0; i < n; ++i) w.x[i] = rnd(w.x[i] / denom);
}

// out = rnd(alpha * u + beta * v) over n elements.
void combine(float* out, float alpha, const float* u, float beta, const float* v, long n, Round rnd) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (long i = 0; i < n; ++i) out[i] = rnd(alpha * u[i] + beta * v[i]);
}

// One Polar Express step on w.x with coefficients (a, b, c).
nfn_status polar_step(nfn_ctx* ctx, const Work& w, const float* abc, Round rnd) {
  const char* op = "muon_step_many";
  Gemm gram;  // A (s,s) = X X^T, or X^T X when tall
  gram.M = gram.N = w.s, gram.K = w.tall ? w.rows : w.cols;
  gram.A = w.x, gram.lda = w.cols, gram.trans_a = w.tall;
  gram.B = w.x, gram.ldb = w.cols, gram.trans_b = !w.tall;
  gram.C = w.a, gram.ldc = w.s;
  NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, op, gram));
  const long ss = static_cast<long>(w.s * w.s), n = static_cast<long>(w.rows * w.cols);
  for (long i = 0; i < ss; ++i) w.a[i] = rnd(w.a[i]);
  Gemm square;  // T = A A
  square.M = square.N = square.K = w.s;
  square.A = w.a, square.lda = w.s;
  square.B = w.a, square.ldb = w.s;
  square.C = w.t, square.ldc = w.s;
  NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, op, square));
  combine(w.p, abc[1], w.a, abc[2], w.t, ss, rnd);
  Gemm apply;  // T = P X (wide) or X P (tall), (rows, cols)
  apply.M = w.rows, apply.N = w.cols, apply.K = w.s;
  apply.A = w.tall ? w.x : w.p, apply.lda = w.tall ? w.cols : w.s;
  apply.B = w.tall ? w.p : w.x, apply.ldb = w.cols;
  apply.C = w.t, apply.ldc = w.cols;
  NFN_RETURN_IF_ERROR(nfn::cpu::gemm(ctx, op, apply));
  combine(w.x, abc[0], w.x, 1.f, w.t, n, rnd);
  return NFN_OK;
}

// p -= lr' (X + weight_decay p) on the master, then the param copy.
template <typename Param>
void apply_update(const nfn_muon_group& grp, const Work& w, float lr, float weight_decay) {
  Param* param = static_cast<Param*>(grp.param);
  const long n = static_cast<long>(w.rows * w.cols);
#pragma omp parallel for schedule(static) if (n > 16384)
  for (long i = 0; i < n; ++i) {
    const float p = grp.master[i] - lr * (w.x[i] + weight_decay * grp.master[i]);
    grp.master[i] = p;
    if (param != nullptr) {
      if constexpr (sizeof(Param) == 2) param[i] = nfn::cpu::f32_to_bf16(p); else param[i] = p;
    }
  }
}

template <typename T>
nfn_status muon_group(nfn_ctx* ctx, const nfn_muon_group& grp, float lr, float beta, bool nesterov,
                      int ns_steps, float weight_decay) {
  const Round rnd{sizeof(T) == 2};
  const Work w = work_for(ctx, grp.rows, grp.cols);
  momentum_into_x<T>(grp, w, beta, nesterov, rnd);
  for (int k = 0; k < ns_steps; ++k) NFN_RETURN_IF_ERROR(polar_step(ctx, w, nfn::kPolarExpress[k], rnd));
  const float shape_lr = lr * std::sqrt(std::max(1.f, static_cast<float>(grp.rows) / grp.cols));
  apply_update<T>(grp, w, shape_lr, weight_decay);
  return NFN_OK;
}

}  // namespace

extern "C" {

nfn_status nfn_muon_step_many(nfn_ctx* ctx, const nfn_muon_group* host_groups, int ngroups, float lr,
                              float momentum, int nesterov, int ns_steps, float weight_decay, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_storage_dtype(ctx, "muon_step_many", dtype));
  const std::string bad = nfn::muon::check_args(host_groups, ngroups, lr, momentum, ns_steps, weight_decay);
  NFN_REQUIRE(bad.empty(), "%s", bad.c_str());
  for (int k = 0; k < ngroups; ++k) {
    const nfn_muon_group& g = host_groups[k];
    if (dtype == NFN_F32)
      NFN_RETURN_IF_ERROR(muon_group<float>(ctx, g, lr, momentum, nesterov != 0, ns_steps, weight_decay));
    else
      NFN_RETURN_IF_ERROR(muon_group<uint16_t>(ctx, g, lr, momentum, nesterov != 0, ns_steps, weight_decay));
  }
  return NFN_OK;
}

}  // extern "C"
