// attention=cudnn: cuDNN's fused SDPA through cudnn-frontend's graph API. libcudnn.so.9 is
// opened on first use (NFN_CUDNN_PATH, then the loader path), so nothing links it. One graph
// per shape and direction is built on first use and kept on the context; a call then binds
// pointers and runs it on the context's stream, with the workspace taken from its scratch.
//
// The tensors are nfn's own, seen through strides: q, k and v are the three C-wide thirds of
// each qkv (B,T,3C) row, as (B, NH, T, HS) with strides (3TC, HS, 3C, 1); out and dout are
// (B,T,C), the same with C for 3C; lse is cuDNN's softmax statistics, (B, NH, T, 1) f32, in
// the natural log, which is the convention of nfn's other attention kernels, so a forward on
// one path and a backward on another agree.
#include "cuda/ops/attention_cudnn.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace nfn::cuda {

// No deterministic backward on sm_100 (the frontend refuses it there): B200s get cuDNN's
// atomic dQ rather than a failure.
bool cudnn_deterministic(const nfn_ctx* ctx) { return ctx->deterministic && ctx->cc_major != 10; }

}  // namespace nfn::cuda

#ifndef NFN_HAVE_CUDNN

namespace nfn::cuda {

const char* cudnn_unavailable_reason() {
  return "this CUDA op library was built without the cuDNN headers (tools/bootstrap.sh fetches "
         "them where nvcc exists; rebuild)";
}
const char* cudnn_path_name() { return "cudnn (not built)"; }
nfn_status cudnn_forward(nfn_ctx* ctx, void*, float*, const void*, int, int, int, int) {
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_forward: %s", cudnn_unavailable_reason());
}
nfn_status cudnn_backward(nfn_ctx* ctx, void*, const void*, const void*, const void*, const float*,
                          int, int, int, int) {
  return fail(ctx, NFN_ERR_UNSUPPORTED, "attention_backward: %s", cudnn_unavailable_reason());
}
void cudnn_release(nfn_ctx*) {}

}  // namespace nfn::cuda

#else

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend resolves every cuDNN call through it
}

namespace nfn::cuda {
namespace {

namespace fe = cudnn_frontend;

std::once_flag load_once;
std::string load_error = "not loaded";
std::string path_name = "cudnn";
size_t cudnn_version = 0;  // major * 10000 + minor * 100 + patch, once loaded

void load_cudnn() {
  std::string tried;
  const char* env = std::getenv("NFN_CUDNN_PATH");
  for (std::string path : {std::string(env ? env : ""), std::string("libcudnn.so.9")}) {
    if (path.empty()) continue;
    // RTLD_GLOBAL: libcudnn.so.9 opens its engine libraries, which look symbols up in it.
    fe::cudnn_dlhandle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (fe::cudnn_dlhandle != nullptr) break;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (fe::cudnn_dlhandle == nullptr) {
    load_error = "cannot open libcudnn.so.9 (tried " + tried +
                 "; set NFN_CUDNN_PATH, or LD_LIBRARY_PATH to the nvidia/cudnn/lib folder)";
    return;
  }
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(fe::cudnn_dlhandle, "cudnnGetVersion"));
  if (get_version == nullptr) {
    load_error = "libcudnn.so.9 has no cudnnGetVersion";
    return;
  }
  // libcudnn.so.9 only dispatches: its first call opens libcudnn_graph.so.9 (beside it, or
  // on the loader path) and aborts the process when that is missing. Look first.
  Dl_info info{};
  std::string graph = "libcudnn_graph.so.9";
  if (dladdr(reinterpret_cast<void*>(get_version), &info) != 0 && info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) graph = self.substr(0, slash + 1) + graph;
  }
  void* sub = dlopen(graph.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (sub == nullptr) sub = dlopen("libcudnn_graph.so.9", RTLD_LAZY | RTLD_LOCAL);
  if (sub == nullptr) {
    load_error = "libcudnn.so.9 was found but its libcudnn_graph.so.9 was not (a partial cuDNN install)";
    return;
  }
  const size_t v = cudnn_version = get_version();  // major * 10000 + minor * 100 + patch since cuDNN 9
  if (v < 90000) {
    load_error = "cuDNN " + std::to_string(v) + " is older than 9.0";
    return;
  }
  path_name = "cudnn (cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
              "." + std::to_string(v % 100) + " SDPA)";
  load_error.clear();
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

struct State {
  cudnnHandle_t handle = nullptr;
  std::map<std::array<int, 6>, Plan> plans;  // (backward, B, T, NH, HS, deterministic)
};

// The frontend's message, then cuDNN's own last error, which names what is missing where the
// frontend only says no engine fits (e.g. "Could not open libnvrtc": cuDNN's SDPA engines are
// compiled at run time, so NVRTC and the driver must be loadable).
nfn_status frontend_fail(nfn_ctx* ctx, const char* op, const char* step, fe::error_t err) {
  std::string backend = fe::detail::get_last_error_string_();
  std::replace(backend.begin(), backend.end(), '\n', ' ');
  if (backend.size() > 300) backend.resize(300);
  return fail(ctx, NFN_ERR_BACKEND, "%s: cuDNN %s: %s%s%s", op, step, err.get_message().c_str(),
              backend.empty() ? "" : " (cuDNN: ", backend.empty() ? "" : (backend + ")").c_str());
}

// The context's handle (on its stream), created on first use.
nfn_status state_of(nfn_ctx* ctx, const char* op, State** out) {
  if (const char* why = cudnn_unavailable_reason()) return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: %s", op, why);
  if (ctx->cudnn == nullptr && ctx->recording)
    return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                "%s: the first cuDNN call creates its handle, which a graph recording cannot; issue "
                "the same ops once before recording them", op);
  if (ctx->cudnn == nullptr) {
    auto* s = new State();
    cudnnStatus_t st = fe::detail::create_handle(&s->handle);
    if (st == CUDNN_STATUS_SUCCESS) st = fe::detail::set_stream(s->handle, ctx->stream);
    if (st != CUDNN_STATUS_SUCCESS) {
      if (s->handle != nullptr) (void)fe::detail::destroy_handle(s->handle);
      delete s;
      return fail(ctx, NFN_ERR_BACKEND, "%s: cuDNN handle: %s", op, fe::detail::get_error_string(st));
    }
    ctx->cudnn = s;
  }
  *out = static_cast<State*>(ctx->cudnn);
  return NFN_OK;
}

// Builds the forward or backward graph of one shape: validated, lowered, the heuristics'
// first supported plan built.
nfn_status build(nfn_ctx* ctx, const char* op, State* s, bool backward, int B, int T, int NH, int HS,
                 Plan* plan) {
  const int64_t C = static_cast<int64_t>(NH) * HS;
  const std::vector<int64_t> dims{B, NH, T, HS};
  const std::vector<int64_t> qkv_stride{T * 3 * C, HS, 3 * C, 1}, out_stride{T * C, HS, C, 1};
  const std::vector<int64_t> stats_dims{B, NH, T, 1}, stats_stride{static_cast<int64_t>(NH) * T, T, 1, 1};
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, Uid uid, const std::vector<int64_t>& stride) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(stride));
  };
  auto q = tensor("q", kQ, qkv_stride), k = tensor("k", kK, qkv_stride), v = tensor("v", kV, qkv_stride);
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  if (!backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_causal_mask(true);
    auto [o, stats] = g->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(dims).set_stride(out_stride);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims).set_stride(stats_stride);
  } else {
    auto o = tensor("o", kO, out_stride), dout = tensor("dout", kDO, out_stride);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_dim(stats_dims)
                               .set_stride(stats_stride)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(scale)
                       .set_causal_mask(true)
                       .set_deterministic_algorithm(cudnn_deterministic(ctx));
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
    dq->set_output(true).set_uid(kDQ).set_dim(dims).set_stride(qkv_stride);
    dk->set_output(true).set_uid(kDK).set_dim(dims).set_stride(qkv_stride);
    dv->set_output(true).set_uid(kDV).set_dim(dims).set_stride(qkv_stride);
  }
  fe::error_t err = g->validate();
  if (err.is_bad()) return frontend_fail(ctx, op, "validate", err);
  err = g->build_operation_graph(s->handle);
  if (err.is_bad()) return frontend_fail(ctx, op, "build_operation_graph", err);
  err = g->create_execution_plans({fe::HeurMode_t::A});
  if (err.is_bad()) return frontend_fail(ctx, op, "create_execution_plans", err);
  err = g->check_support();
  if (err.is_bad()) return frontend_fail(ctx, op, "check_support", err);
  err = g->build_plans(s->handle);
  if (err.is_bad()) return frontend_fail(ctx, op, "build_plans", err);
  err = g->get_workspace_size(plan->workspace);
  if (err.is_bad()) return frontend_fail(ctx, op, "get_workspace_size", err);
  plan->graph = std::move(g);
  return NFN_OK;
}

// Runs the shape's graph (built on first use) with these pointers.
nfn_status run_graph(nfn_ctx* ctx, const char* op, bool backward, int B, int T, int C, int NH,
                     std::unordered_map<int64_t, void*>& pack) {
  State* s = nullptr;
  NFN_TRY(state_of(ctx, op, &s));
  const int HS = C / NH;
  const std::array<int, 6> key{backward, B, T, NH, HS, backward && cudnn_deterministic(ctx)};
  auto found = s->plans.find(key);
  if (found == s->plans.end()) {
    if (ctx->recording)
      return fail(ctx, NFN_ERR_INVALID_ARGUMENT,
                  "%s: cuDNN builds a shape's plan on its first call, which a graph recording "
                  "cannot; issue the same ops once before recording them", op);
    Plan built;
    NFN_TRY(build(ctx, op, s, backward, B, T, NH, HS, &built));
    found = s->plans.emplace(key, std::move(built)).first;
  }
  // Up to cuDNN 9.15.0 the frontend gives a backward whose sequence is not a multiple of 128 a
  // padding mask whose lengths it copies from the host at every execute: not in a recording.
  if (ctx->recording && backward && T % 128 != 0 && cudnn_version <= 91500)
    return fail(ctx, NFN_ERR_UNSUPPORTED,
                "%s: cuDNN %zu's backward at T=%d (not a multiple of 128) copies from the host at every "
                "call, which a graph recording cannot hold; use cuDNN 9.15.1 or newer, or no graphs",
                op, cudnn_version, T);
  const Plan& plan = found->second;
  void* workspace = nullptr;
  if (plan.workspace > 0) NFN_TRY(scratch(ctx, static_cast<size_t>(plan.workspace), &workspace, op));
  fe::error_t err = plan.graph->execute(s->handle, pack, workspace);
  if (err.is_bad()) return frontend_fail(ctx, op, "execute", err);
  return NFN_OK;
}

// The frontend throws where a cuDNN symbol is missing (an older libcudnn): one message.
nfn_status run(nfn_ctx* ctx, const char* op, bool backward, int B, int T, int C, int NH,
               std::unordered_map<int64_t, void*> pack) {
  try {
    return run_graph(ctx, op, backward, B, T, C, NH, pack);
  } catch (const std::exception& e) {
    return fail(ctx, NFN_ERR_BACKEND, "%s: cuDNN: %s", op, e.what());
  }
}

// The q, k, v (or dq, dk, dv) thirds of a (B,T,3C) bf16 row.
void* third(const void* p, int C, int i) {
  return static_cast<char*>(const_cast<void*>(p)) + static_cast<size_t>(i) * C * 2;
}

}  // namespace

const char* cudnn_unavailable_reason() {
  std::call_once(load_once, load_cudnn);
  return load_error.empty() ? nullptr : load_error.c_str();
}

const char* cudnn_path_name() { return path_name.c_str(); }

nfn_status cudnn_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T, int C,
                         int NH) {
  return run(ctx, "attention_forward", false, B, T, C, NH,
             {{kQ, third(qkv, C, 0)}, {kK, third(qkv, C, 1)}, {kV, third(qkv, C, 2)}, {kO, out}, {kStats, lse}});
}

nfn_status cudnn_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                          const void* out, const float* lse, int B, int T, int C, int NH) {
  return run(ctx, "attention_backward", true, B, T, C, NH,
             {{kQ, third(qkv, C, 0)}, {kK, third(qkv, C, 1)}, {kV, third(qkv, C, 2)},
              {kO, const_cast<void*>(out)}, {kDO, const_cast<void*>(dout)},
              {kStats, const_cast<float*>(lse)}, {kDQ, third(dqkv, C, 0)}, {kDK, third(dqkv, C, 1)},
              {kDV, third(dqkv, C, 2)}});
}

void cudnn_release(nfn_ctx* ctx) {
  if (ctx->cudnn == nullptr) return;
  auto* s = static_cast<State*>(ctx->cudnn);
  s->plans.clear();
  if (s->handle != nullptr) (void)fe::detail::destroy_handle(s->handle);
  delete s;
  ctx->cudnn = nullptr;
}

}  // namespace nfn::cuda

#endif  // NFN_HAVE_CUDNN
