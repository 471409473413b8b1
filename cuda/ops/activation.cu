// Elementwise ops: GPT-2's tanh GELU and its gradient, ReLU², SwiGLU and tanh soft-capping
// with their gradients, and bias + residual. The ReLU², SwiGLU and soft-cap kernels move 16
// bytes a load (Pack) where the sizes and pointers allow it, one element a load otherwise.
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "cuda/ops/activation.h"
#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::aligned16;
using nfn::cuda::fail;
using nfn::cuda::from_f32;
using nfn::cuda::load_or;
using nfn::cuda::load_pack;
using nfn::cuda::Pack;
using nfn::cuda::store_pack;
using nfn::cuda::to_f32;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
}

#define GRID_STRIDE(i, n)                                                               \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) out[i] = from_f32<T>(gelu(to_f32(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* pre, const T* dout, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) dinp[i] = from_f32<T>(to_f32(dout[i]) * gelu_grad(to_f32(pre[i])));
}

// The per-element functions of ReLU² and soft-capping, as function objects, so one kernel
// template serves each shape of op (map_kernel, grad_kernel). The CPU library
// (cc/ops/cpu/activation.cc) uses the same formulas.
struct ReluSquared {
  __device__ __forceinline__ float operator()(float x) const {
    const float r = fmaxf(x, 0.f);
    return r * r;
  }
};

struct ReluSquaredGrad {
  __device__ __forceinline__ float operator()(float x) const { return 2.f * fmaxf(x, 0.f); }
};

struct Softcap {
  float cap;
  __device__ __forceinline__ float operator()(float x) const { return cap * tanhf(x / cap); }
};

// 1 - tanh(u)^2 as 4e / (1 + e)^2, e = e^{-2|u|}: accurate where tanh saturates.
struct SoftcapGrad {
  float cap;
  __device__ __forceinline__ float operator()(float x) const {
    const float e = expf(-2.f * fabsf(x / cap));
    return 4.f * e / ((1.f + e) * (1.f + e));
  }
};

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// out = f(inp), P elements a pack; n counts packs.
template <typename T, int P, typename F>
__global__ void map_kernel(T* out, const T* inp, size_t n, F f) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    float v[P];
    load_pack<P>(inp, i, v);
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = f(v[k]);
    store_pack<P>(out, i, v);
  }
}

// dinp = dout * f(pre), P elements a pack; n counts packs. dinp may be dout.
template <typename T, int P, typename F>
__global__ void grad_kernel(T* dinp, const T* pre, const T* dout, size_t n, F f) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    float x[P], g[P];
    load_pack<P>(pre, i, x);
    load_pack<P>(dout, i, g);
#pragma unroll
    for (int k = 0; k < P; ++k) g[k] *= f(x[k]);
    store_pack<P>(dinp, i, g);
  }
}

// out (N,H) = silu(gate) * up from inp (N,2H) = [gate | up], P elements a pack; hp = H / P.
template <typename T, int P>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int hp, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    const size_t gate = (i / hp) * 2 * hp + i % hp;
    float g[P], u[P];
    load_pack<P>(inp, gate, g);
    load_pack<P>(inp, gate + hp, u);
#pragma unroll
    for (int k = 0; k < P; ++k) u[k] *= g[k] * sigmoid(g[k]);
    store_pack<P>(out, i, u);
  }
}

// dinp (N,2H) = [dout * up * silu'(gate), dout * silu(gate)]; dinp may be inp: each thread
// reads its gate and up packs before writing them.
template <typename T, int P>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int hp, size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    const size_t gate = (i / hp) * 2 * hp + i % hp;
    float g[P], u[P], d[P];
    load_pack<P>(inp, gate, g);
    load_pack<P>(inp, gate + hp, u);
    load_pack<P>(dout, i, d);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float s = sigmoid(g[k]);
      const float dgate = d[k] * u[k] * s * (1.f + g[k] * (1.f - s));
      u[k] = d[k] * g[k] * s;
      g[k] = dgate;
    }
    store_pack<P>(dinp, gate, g);
    store_pack<P>(dinp, gate + hp, u);
  }
}

// Whether tensors starting at `ptrs`, in rows (or runs) of `width` elements, can move as Pack<E>.
template <typename E>
bool packable(size_t width, std::initializer_list<const void*> ptrs) {
  return width % Pack<E>::n == 0 && aligned16(ptrs);
}

// Runs launch(std::integral_constant<int, V>) with V = Pack<E>::n, so the kernel it launches
// moves 16 bytes a load, where `packed`; else with V = 1, an element a load.
template <typename E, typename Launch>
nfn_status launch_packed(nfn_ctx* ctx, const char* op, bool packed, Launch&& launch) {
  if (packed)
    launch(std::integral_constant<int, Pack<E>::n>{});
  else
    launch(std::integral_constant<int, 1>{});
  NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  return NFN_OK;
}

// out[0:n) = f(inp[0:n)); arguments already checked.
template <typename F>
nfn_status launch_map(nfn_ctx* ctx, const char* op, void* out, const void* inp, size_t n, nfn_dtype dtype, F f) {
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = launch_packed<E>(ctx, op, packable<E>(n, {out, inp}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    nfn::cuda::launch_kernel(ctx, map_kernel<E, V, F>, nfn::cuda::grid_for(n / V, 256), 256, 0,
                             static_cast<E*>(out), static_cast<const E*>(inp), n / V, f);
  }));
  return s;
}

// dinp[0:n) = dout * f(pre); arguments already checked.
template <typename F>
nfn_status launch_grad(nfn_ctx* ctx, const char* op, void* dinp, const void* pre, const void* dout, size_t n,
                       nfn_dtype dtype, F f) {
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = launch_packed<E>(ctx, op, packable<E>(n, {dinp, pre, dout}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    nfn::cuda::launch_kernel(ctx, grad_kernel<E, V, F>, nfn::cuda::grid_for(n / V, 256), 256, 0,
                             static_cast<E*>(dinp), static_cast<const E*>(pre), static_cast<const E*>(dout), n / V, f);
  }));
  return s;
}

template <typename T>
__global__ void residual_kernel(T* out, const T* residual, const T* inp, const T* bias, int C,
                                size_t n) {
  nfn::cuda::pdl_begin();
  GRID_STRIDE(i, n) {
    out[i] = from_f32<T>(to_f32(residual[i]) + to_f32(inp[i]) + load_or(bias, i % C, 0.f));
  }
}

// softcap's cap: positive and finite (a NaN cap fails too).
nfn_status check_cap(nfn_ctx* ctx, const char* op, float cap) {
  if (cap > 0.f && !std::isinf(cap)) return NFN_OK;
  return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: cap=%g must be positive and finite", op, static_cast<double>(cap));
}

}  // namespace

namespace nfn::cuda {

nfn_status launch_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_DISPATCH(dtype, E, nfn::cuda::launch_kernel(ctx, gelu_forward_kernel<E>, grid_for(n, 256), 256, 0,
                                                  static_cast<E*>(out), static_cast<const E*>(inp), n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "gelu_forward");
  return NFN_OK;
}

}  // namespace nfn::cuda

extern "C" {

nfn_status nfn_gelu_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "gelu_forward");
  if (n == 0) return NFN_OK;
  if (out == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "gelu_forward: null out or inp");
  return nfn::cuda::launch_gelu_forward(ctx, out, inp, n, dtype);
}

nfn_status nfn_gelu_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n,
                             nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "gelu_backward");
  if (n == 0) return NFN_OK;
  if (dinp == nullptr || pre == nullptr || dout == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "gelu_backward: null dinp, pre or dout");
  NFN_DISPATCH(dtype, E,
               nfn::cuda::launch_kernel(ctx, gelu_backward_kernel<E>, nfn::cuda::grid_for(n, 256), 256, 0,
                                        static_cast<E*>(dinp), static_cast<const E*>(pre),
                                        static_cast<const E*>(dout), n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "gelu_backward");
  return NFN_OK;
}

nfn_status nfn_residual_forward(nfn_ctx* ctx, void* out, const void* residual, const void* inp,
                                const void* bias, int N, int C, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  NFN_CHECK_DTYPE(ctx, dtype, "residual_forward");
  if (N <= 0 || C <= 0)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "residual_forward: N=%d C=%d must be positive", N, C);
  if (out == nullptr || residual == nullptr || inp == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "residual_forward: null out, residual or inp");
  const size_t n = static_cast<size_t>(N) * C;
  NFN_DISPATCH(dtype, E,
               nfn::cuda::launch_kernel(ctx, residual_kernel<E>, nfn::cuda::grid_for(n, 256), 256, 0,
                                        static_cast<E*>(out), static_cast<const E*>(residual),
                                        static_cast<const E*>(inp), static_cast<const E*>(bias), C, n));
  NFN_CUDA_TRY(ctx, cudaGetLastError(), "residual_forward");
  return NFN_OK;
}

nfn_status nfn_relu_squared_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "relu_squared_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (n == 0) return NFN_OK;
  if (out == nullptr || inp == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  return launch_map(ctx, op, out, inp, n, dtype, ReluSquared{});
}

nfn_status nfn_relu_squared_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n,
                                     nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "relu_squared_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (n == 0) return NFN_OK;
  if (dinp == nullptr || pre == nullptr || dout == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dinp, pre or dout", op);
  return launch_grad(ctx, op, dinp, pre, dout, n, dtype, ReluSquaredGrad{});
}

nfn_status nfn_swiglu_forward(nfn_ctx* ctx, void* out, const void* inp, int N, int H, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "swiglu_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (N <= 0 || H <= 0) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d H=%d must be positive", op, N, H);
  if (out == nullptr || inp == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  const size_t n = static_cast<size_t>(N) * H;
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = launch_packed<E>(ctx, op, packable<E>(H, {out, inp}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    nfn::cuda::launch_kernel(ctx, swiglu_forward_kernel<E, V>, nfn::cuda::grid_for(n / V, 256), 256, 0,
                             static_cast<E*>(out), static_cast<const E*>(inp), H / V, n / V);
  }));
  return s;
}

nfn_status nfn_swiglu_backward(nfn_ctx* ctx, void* dinp, const void* inp, const void* dout, int N, int H,
                               nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "swiglu_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (N <= 0 || H <= 0) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: N=%d H=%d must be positive", op, N, H);
  if (dinp == nullptr || inp == nullptr || dout == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dinp, inp or dout", op);
  const size_t n = static_cast<size_t>(N) * H;
  nfn_status s = NFN_OK;
  NFN_DISPATCH(dtype, E, s = launch_packed<E>(ctx, op, packable<E>(H, {dinp, inp, dout}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    nfn::cuda::launch_kernel(ctx, swiglu_backward_kernel<E, V>, nfn::cuda::grid_for(n / V, 256), 256, 0,
                             static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), H / V,
                             n / V);
  }));
  return s;
}

nfn_status nfn_softcap_forward(nfn_ctx* ctx, void* out, const void* inp, size_t n, float cap, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "softcap_forward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_cap(ctx, op, cap));
  if (n == 0) return NFN_OK;
  if (out == nullptr || inp == nullptr) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null out or inp", op);
  return launch_map(ctx, op, out, inp, n, dtype, Softcap{cap});
}

nfn_status nfn_softcap_backward(nfn_ctx* ctx, void* dinp, const void* pre, const void* dout, size_t n, float cap,
                                nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "softcap_backward";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  NFN_TRY(check_cap(ctx, op, cap));
  if (n == 0) return NFN_OK;
  if (dinp == nullptr || pre == nullptr || dout == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: null dinp, pre or dout", op);
  return launch_grad(ctx, op, dinp, pre, dout, n, dtype, SoftcapGrad{cap});
}

}  // extern "C"
