// AdamW over many parameter groups in one launch per batch of groups. The clip scale is
// computed on the device from the sum of squares, so the step needs no host round trip.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/ops/context.h"
#include "cuda/ops/dtype.cuh"
#include "cuda/ops/launch.h"

using nfn::cuda::fail;
using nfn::cuda::load_pack;
using nfn::cuda::store_pack;

namespace {

constexpr int kMaxGroups = 192;  // kernel parameters stay under 16 KiB

struct GroupList {
  float* master[kMaxGroups];
  void* param[kMaxGroups];
  const void* grad[kMaxGroups];
  float* m[kMaxGroups];
  float* v[kMaxGroups];
  size_t end[kMaxGroups];  // exclusive prefix ends of the element counts
  float weight_decay[kMaxGroups];
  int count;
};

struct Hyper {
  float lr, beta1, beta2, eps, bias1, bias2, max_grad_norm;  // bias* = 1 - beta^step
};

// V consecutive elements of one group a thread (every group's size a multiple of V, its
// tensors aligned to V elements), moved V at a time; the same arithmetic for any V.
template <typename T, int V>
__global__ void adamw_kernel(GroupList list, size_t total, Hyper hp, const float* grad_sumsq) {
  nfn::cuda::pdl_begin();
  float scale = 1.f;
  if (hp.max_grad_norm > 0.f) {
    const float norm = sqrtf(*grad_sumsq);
    if (norm > hp.max_grad_norm) scale = hp.max_grad_norm / norm;
  }
  int g = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total / V;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    while (i * V >= list.end[g]) ++g;
    const size_t k = (i * V - (g == 0 ? 0 : list.end[g - 1])) / V;  // the group's k-th pack
    float grad[V], m[V], v[V], p[V];
    load_pack(static_cast<const T*>(list.grad[g]), k, grad);
    load_pack(list.m[g], k, m);
    load_pack(list.v[g], k, v);
    load_pack(list.master[g], k, p);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float gr = grad[j] * scale;
      m[j] = hp.beta1 * m[j] + (1.f - hp.beta1) * gr;
      v[j] = hp.beta2 * v[j] + (1.f - hp.beta2) * gr * gr;
      const float update = (m[j] / hp.bias1) / (sqrtf(v[j] / hp.bias2) + hp.eps) + list.weight_decay[g] * p[j];
      p[j] = p[j] - hp.lr * update;
    }
    store_pack(list.m[g], k, m);
    store_pack(list.v[g], k, v);
    store_pack(list.master[g], k, p);
    if (list.param[g] != nullptr) store_pack(static_cast<T*>(list.param[g]), k, p);
  }
}

// Whether every group of `list` can move 4 elements at a time.
bool packs_of_4(const GroupList& list, size_t elem_bytes) {
  for (int g = 0; g < list.count; ++g) {
    const size_t n = list.end[g] - (g == 0 ? 0 : list.end[g - 1]);
    const auto ok = [&](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
    if (n % 4 != 0 || !ok(list.master[g], 16) || !ok(list.m[g], 16) || !ok(list.v[g], 16) ||
        !ok(list.grad[g], 4 * elem_bytes) || !ok(list.param[g], 4 * elem_bytes))
      return false;
  }
  return true;
}

}  // namespace

extern "C" {

nfn_status nfn_adamw_step_many(nfn_ctx* ctx, const nfn_adamw_group* host_groups, int ngroups,
                               int step, float lr, float beta1, float beta2, float eps,
                               const float* grad_sumsq, float max_grad_norm, nfn_dtype dtype) {
  NFN_CHECK_CTX(ctx);
  const char* op = "adamw_step_many";
  NFN_CHECK_DTYPE(ctx, dtype, op);
  if (ngroups < 0 || (ngroups > 0 && host_groups == nullptr))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: %d groups at %p", op, ngroups,
                static_cast<const void*>(host_groups));
  if (step < 1) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: step %d must be >= 1", op, step);
  if (!(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f))
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: betas (%g, %g) must lie in [0, 1)", op, beta1, beta2);
  if (!std::isfinite(lr) || !(eps > 0.f) || !std::isfinite(eps))  // eps 0: 0 / 0 where a gradient was always 0
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: lr=%g eps=%g are invalid (eps must be positive)", op, lr, eps);
  if (max_grad_norm > 0.f && grad_sumsq == nullptr)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: max_grad_norm > 0 needs grad_sumsq", op);
  for (int i = 0; i < ngroups; ++i) {
    const nfn_adamw_group& g = host_groups[i];
    if (g.n > 0 && (g.master == nullptr || g.grad == nullptr || g.m == nullptr || g.v == nullptr))
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: group %d has a null master, grad, m or v", op, i);
  }
  const Hyper hp{lr,
                 beta1,
                 beta2,
                 eps,
                 static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step)),
                 static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), step)),
                 max_grad_norm};
  for (int first = 0; first < ngroups; first += kMaxGroups) {
    GroupList list{};
    size_t total = 0;
    list.count = std::min(kMaxGroups, ngroups - first);
    for (int j = 0; j < list.count; ++j) {
      const nfn_adamw_group& g = host_groups[first + j];
      list.master[j] = g.master;
      list.param[j] = g.param;
      list.grad[j] = g.grad;
      list.m[j] = g.m;
      list.v[j] = g.v;
      list.weight_decay[j] = g.weight_decay;
      total += g.n;
      list.end[j] = total;
    }
    if (total == 0) continue;
    const unsigned block = 256, grid = std::min(nfn::cuda::grid_for(total, block), 132u * 16u);
    NFN_DISPATCH(dtype, E, {
      if (packs_of_4(list, sizeof(E)))
        nfn::cuda::launch_kernel(ctx, adamw_kernel<E, 4>, grid, block, 0, list, total, hp, grad_sumsq);
      else
        nfn::cuda::launch_kernel(ctx, adamw_kernel<E, 1>, grid, block, 0, list, total, hp, grad_sumsq);
    });
    NFN_CUDA_TRY(ctx, cudaGetLastError(), op);
  }
  return NFN_OK;
}

}  // extern "C"
