// cuBLASLt, opened with dlopen on first use: the library builds and loads without the
// nvidia-cublas wheel, and finds the GPU machine's copy (LD_LIBRARY_PATH, NFN_CUBLASLT_PATH,
// or the wheel found at build time). Host code only, built by the host compiler; the
// emulated library replaces it (cuda/emu/gemm.cc).
#include "cuda/ops/cublaslt.h"

#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#ifdef NFN_HAVE_CUBLASLT
#include <cublasLt.h>

#include "cuda/ops/tuned_picks.h"
#endif

namespace nfn::cuda {

constexpr size_t kGemmWorkspaceBytes = 32u << 20;  // Hopper kernels want up to 32 MiB

size_t gemm_workspace_bytes() { return kGemmWorkspaceBytes; }

#ifndef NFN_HAVE_CUBLASLT

nfn_status gemm(nfn_ctx* ctx, const char* op, const GemmArgs&) {
  return fail(ctx, NFN_ERR_UNSUPPORTED,
              "%s: this CUDA op library was built without cuBLASLt headers (install the "
              "nvidia-cublas==13.0.* wheel and rebuild)",
              op);
}

nfn_status check_gemm_descriptors(nfn_ctx* ctx, const char* op, const GemmArgs& g) { return gemm(ctx, op, g); }

void gemm_release(nfn_ctx*) {}

#else

namespace {

constexpr int kTuneCandidates = 8;  // gemm_tune=on times cuBLASLt's first 8 picks of a shape
constexpr int kTuneRuns = 3;        // each, after one untimed run

// The cuBLASLt entry points nfn uses, typed from the real header.
struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulAlgoCheck) algo_check;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtGetVersion) version;
};

CublasLt api;
std::string load_error;  // empty once loaded
std::once_flag load_once;

#ifndef NFN_CUBLASLT_LIB_DIR
#define NFN_CUBLASLT_LIB_DIR ""
#endif

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*slot == nullptr) load_error = std::string("libcublasLt has no symbol ") + name;
  return *slot != nullptr;
}

void load_cublaslt() {
  std::string tried;
  void* lib = nullptr;
  std::string candidates[3];
  if (const char* env = std::getenv("NFN_CUBLASLT_PATH")) candidates[0] = env;
  candidates[1] = "libcublasLt.so.13";  // LD_LIBRARY_PATH, the loader cache
  if (NFN_CUBLASLT_LIB_DIR[0] != '\0')
    candidates[2] = std::string(NFN_CUBLASLT_LIB_DIR) + "/libcublasLt.so.13";
  for (const std::string& path : candidates) {
    if (path.empty()) continue;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (lib == nullptr) {
    load_error = "cannot open libcublasLt.so.13 (tried " + tried +
                 "; set NFN_CUBLASLT_PATH or LD_LIBRARY_PATH to the nvidia/cu13/lib folder)";
    return;
  }
  bool ok = resolve(lib, "cublasLtCreate", &api.create) &&
            resolve(lib, "cublasLtDestroy", &api.destroy) &&
            resolve(lib, "cublasLtGetStatusString", &api.status_string) &&
            resolve(lib, "cublasLtMatmulDescCreate", &api.desc_create) &&
            resolve(lib, "cublasLtMatmulDescDestroy", &api.desc_destroy) &&
            resolve(lib, "cublasLtMatmulDescSetAttribute", &api.desc_set) &&
            resolve(lib, "cublasLtMatrixLayoutCreate", &api.layout_create) &&
            resolve(lib, "cublasLtMatrixLayoutDestroy", &api.layout_destroy) &&
            resolve(lib, "cublasLtMatmulPreferenceCreate", &api.pref_create) &&
            resolve(lib, "cublasLtMatmulPreferenceDestroy", &api.pref_destroy) &&
            resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &api.pref_set) &&
            resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &api.heuristic) &&
            resolve(lib, "cublasLtMatmulAlgoCheck", &api.algo_check) &&
            resolve(lib, "cublasLtMatmul", &api.matmul) && resolve(lib, "cublasLtGetVersion", &api.version);
  if (ok) load_error.clear();
}

cudaDataType_t cuda_type(nfn_dtype dtype) { return dtype == NFN_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// The largest power of two up to 256 that divides the address (cuBLASLt picks kernels by it).
uint32_t alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

// Owns the descriptors of one call, whichever way it returns.
struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) api.pref_destroy(pref);
    if (d) api.layout_destroy(d);
    if (b) api.layout_destroy(b);
    if (a) api.layout_destroy(a);
    if (desc) api.desc_destroy(desc);
  }
};

nfn_status load(nfn_ctx* ctx, const char* op) {
  std::call_once(load_once, [] {
    load_error = "not loaded";
    load_cublaslt();
  });
  if (!load_error.empty()) return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: %s", op, load_error.c_str());
  return NFN_OK;
}

// The operation, layouts and preference of `g` (no handle or GPU needed).
nfn_status describe(nfn_ctx* ctx, const char* op, const GemmArgs& g, Descriptors* s) {
#define LT_TRY(expr)                                                                       \
  do {                                                                                     \
    cublasStatus_t st_ = (expr);                                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      return fail(ctx, NFN_ERR_BACKEND, "%s: %s: %s", op, #expr, api.status_string(st_)); \
  } while (0)
  // f32 inputs get plain f32 math (no TF32) so results match the CPU to 1e-5.
  LT_TRY(api.desc_create(&s->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (g.epilogue) {
    case GemmEpilogue::none: break;
    case GemmEpilogue::bias: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case GemmEpilogue::gelu_aux: epi = CUBLASLT_EPILOGUE_GELU_AUX; break;
    case GemmEpilogue::gelu_aux_bias: epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
    case GemmEpilogue::dgelu: epi = CUBLASLT_EPILOGUE_DGELU; break;
    case GemmEpilogue::dgelu_bgrad: epi = CUBLASLT_EPILOGUE_DGELU_BGRAD; break;
  }
  LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  // The bias vector (read), or under dgelu_bgrad the bias gradient (written), in D's dtype.
  if (g.epilogue == GemmEpilogue::bias || g.epilogue == GemmEpilogue::gelu_aux_bias ||
      g.epilogue == GemmEpilogue::dgelu_bgrad)
    LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
  if (has_gelu_aux(g)) {
    int64_t ld_aux = g.m;
    LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
    LT_TRY(api.desc_set(s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux));
  }
  const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  LT_TRY(api.layout_create(&s->a, cuda_type(g.ab), a_rows, a_cols, g.lda));
  LT_TRY(api.layout_create(&s->b, cuda_type(g.ab), b_rows, b_cols, g.ldb));
  LT_TRY(api.layout_create(&s->d, cuda_type(g.d_dtype), g.m, g.n, g.ldd));
  LT_TRY(api.pref_create(&s->pref));
  size_t ws = kGemmWorkspaceBytes;
  LT_TRY(api.pref_set(s->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const void* c = g.c != nullptr ? g.c : g.d;
  uint32_t align_a = alignment(g.a), align_b = alignment(g.b), align_c = alignment(c), align_d = alignment(g.d);
  LT_TRY(api.pref_set(s->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  LT_TRY(api.pref_set(s->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  LT_TRY(api.pref_set(s->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
  LT_TRY(api.pref_set(s->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
#undef LT_TRY
  return NFN_OK;
}

// A GEMM's shape, layouts, epilogue and operand alignments: what cuBLASLt picks a kernel by
// (and gemm_tune, so that a tuned pick and the heuristic's live side by side).
using AlgoKey = GemmKey;

AlgoKey key_of(const nfn_ctx* ctx, const GemmArgs& g) {
  const void* c = g.c != nullptr ? g.c : g.d;
  return {g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.ab, g.d_dtype,
          static_cast<int64_t>(g.epilogue), g.beta != 0.f, alignment(g.a), alignment(g.b), alignment(c),
          alignment(g.d), alignment(g.aux), alignment(g.bias), ctx->gemm_tune};
}

// The kernel picked for each key (ctx->gemm_algos), and the keys cuBLASLt has no kernel for
// (a fused epilogue it refuses: the caller then runs the unfused form): the heuristic is
// asked once a shape.
struct AlgoCache {
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  std::set<AlgoKey> refused;
};

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// gemm_tune=on: the fastest of the heuristic's `n` picks for `g` (CUDA events around
// kTuneRuns runs after one untimed), each writing outputs of its own (D, and the GELU
// input or bias gradient its epilogue writes), so the caller's buffers are only read. Where
// that memory cannot be had, or no pick ran, the heuristic's first pick, untimed (*timed false).
nfn_status fastest(nfn_ctx* ctx, const char* op, const GemmArgs& g, const cublasLtMatmulHeuristicResult_t* picks,
                   int n, cublasLtMatmulAlgo_t* best, bool* timed) {
  *best = picks[0].algo;
  *timed = false;
  const size_t size = g.d_dtype == NFN_BF16 ? 2 : 4;
  const bool writes_aux = g.epilogue == GemmEpilogue::gelu_aux || g.epilogue == GemmEpilogue::gelu_aux_bias;
  const bool writes_bias = g.epilogue == GemmEpilogue::dgelu_bgrad;
  const size_t d_bytes = round_up(size * g.ldd * g.n), aux_bytes = writes_aux ? round_up(size * g.m * g.n) : 0;
  const size_t bias_bytes = writes_bias ? round_up(size * g.m) : 0;
  char* buf = nullptr;
  if (cudaMalloc(&buf, d_bytes + aux_bytes + bias_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the untuned pick will do
    return NFN_OK;
  }
  GemmArgs t = g;
  t.c = g.c != nullptr ? g.c : g.d;  // read where the call reads it
  t.d = buf;
  if (writes_aux) t.aux = buf + d_bytes;
  if (writes_bias) t.bias = buf + d_bytes + aux_bytes;
  Descriptors s;
  nfn_status status = describe(ctx, op, t, &s);
  // Timed alone: with overlap=on, a GEMM on the other stream could be running beside these
  // (the picks are kept in a file, so a pick skewed by it would stay).
  if (status == NFN_OK && ctx->side_stream != nullptr) status = check(ctx, cudaDeviceSynchronize(), op);
  cudaEvent_t start = nullptr, stop = nullptr;
  if (status == NFN_OK) status = check(ctx, cudaEventCreate(&start), op);
  if (status == NFN_OK) status = check(ctx, cudaEventCreate(&stop), op);
  const float alpha = 1.f, beta = g.beta;
  float best_ms = 0.f;
  for (int i = 0; i < n && status == NFN_OK; ++i) {
    bool ran = true;
    for (int run = 0; run <= kTuneRuns && ran; ++run) {
      if (run == 1) status = check(ctx, cudaEventRecord(start, ctx->stream), op);
      ran = status == NFN_OK &&
            api.matmul(static_cast<cublasLtHandle_t>(ctx->cublaslt), s.desc, &alpha, t.a, s.a, t.b, s.b, &beta, t.c,
                       s.d, t.d, s.d, &picks[i].algo, ctx->gemm_workspace, kGemmWorkspaceBytes,
                       ctx->stream) == CUBLAS_STATUS_SUCCESS;
    }
    if (!ran && status == NFN_OK) (void)cudaGetLastError();  // a failed trial's error is not the next op's
    if (!ran || status != NFN_OK) continue;
    float ms = 0.f;
    status = check(ctx, cudaEventRecord(stop, ctx->stream), op);
    if (status == NFN_OK) status = check(ctx, cudaEventSynchronize(stop), op);
    if (status == NFN_OK) status = check(ctx, cudaEventElapsedTime(&ms, start, stop), op);
    if (status == NFN_OK && (!*timed || ms < best_ms)) best_ms = ms, *best = picks[i].algo, *timed = true;
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(buf);  // synchronizes: the trials are done with it
  return status;
}

// gemm_tune's picks file (tuned_picks.h), read on first use; NULL where the context keeps none
// (gemm_tune_cache=off, or no home to keep it in). A file that does not parse fails the op
// with its name and line.
nfn_status tuned_picks(nfn_ctx* ctx, const char* op, TunedPicks** out) {
  *out = static_cast<TunedPicks*>(ctx->tuned_picks);
  if (*out != nullptr || ctx->gemm_tune_cache == "off") return NFN_OK;
  auto t = std::make_unique<TunedPicks>();
  t->header = picks_header(ctx->device_name, api.version());
  t->path = !ctx->gemm_tune_cache.empty() ? ctx->gemm_tune_cache : default_picks_path(ctx->device_name, api.version());
  if (t->path.empty()) return NFN_OK;
  std::string error;
  if (!load_picks(t.get(), &error)) return fail(ctx, NFN_ERR_INVALID_ARGUMENT, "%s: gemm_tune: %s", op, error.c_str());
  *out = t.release();
  ctx->tuned_picks = *out;
  return NFN_OK;
}

// gemm_tune=on: the kernel an earlier run picked for `key`, if its file has one that cuBLASLt
// still accepts for these descriptors within our workspace (*found). One it refuses is dropped
// (timed again).
nfn_status kept_pick(nfn_ctx* ctx, const char* op, const AlgoKey& key, const Descriptors& s,
                     cublasLtMatmulAlgo_t* algo, bool* found) {
  *found = false;
  TunedPicks* t = nullptr;
  NFN_TRY(tuned_picks(ctx, op, &t));
  if (t == nullptr) return NFN_OK;
  auto hit = t->picks.find(key);
  if (hit == t->picks.end()) return NFN_OK;
  static_assert(sizeof algo->data == sizeof(AlgoWords), "cublasLtMatmulAlgo_t is 8 words");
  std::memcpy(algo->data, hit->second.data(), sizeof algo->data);
  cublasLtMatmulHeuristicResult_t result = {};
  *found = api.algo_check(static_cast<cublasLtHandle_t>(ctx->cublaslt), s.desc, s.a, s.b, s.d, s.d, algo, &result) ==
               CUBLAS_STATUS_SUCCESS &&
           result.workspaceSize <= kGemmWorkspaceBytes;
  if (*found)
    ++ctx->gemm_kept;
  else
    t->picks.erase(hit);
  return NFN_OK;
}

// gemm_tune=on: keeps a timed pick in the context's picks file. A file that cannot be written
// costs only the next run its timing, so that is not an error.
void keep_pick(nfn_ctx* ctx, const AlgoKey& key, const cublasLtMatmulAlgo_t& algo) {
  ++ctx->gemm_timed;
  auto* t = static_cast<TunedPicks*>(ctx->tuned_picks);
  if (t == nullptr) return;
  AlgoWords words;
  std::memcpy(words.data(), algo.data, sizeof algo.data);
  t->picks[key] = words;
  std::string ignored;
  save_picks(*t, &ignored);
}

// Drops `key`'s kernel from the context's cache and its picks file (saved), so the next pick
// asks the heuristic again.
void forget_pick(nfn_ctx* ctx, const AlgoKey& key) {
  static_cast<AlgoCache*>(ctx->gemm_algos)->algos.erase(key);
  auto* t = static_cast<TunedPicks*>(ctx->tuned_picks);
  if (t == nullptr || t->picks.erase(key) == 0) return;
  std::string ignored;
  save_picks(*t, &ignored);
}

// Whether cuBLASLt's `status` for `g` is a refusal the caller may answer with the unfused
// form: a fused epilogue's NOT_SUPPORTED or INVALID_VALUE, which cuBLASLt returns before it
// launches anything.
bool refusable(const GemmArgs& g, cublasStatus_t status) {
  return g.epilogue != GemmEpilogue::none &&
         (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE);
}

// The kernel for `g`: cached, else (gemm_tune=on) the one its picks file keeps, else the
// heuristic's first pick (gemm_tune=on, outside a graph recording: the fastest of its first
// kTuneCandidates, then kept in the file), then cached (but not an untimed pick of gemm_tune's).
// *from_file: the kernel is the picks file's, new to this context.
nfn_status pick(nfn_ctx* ctx, const char* op, const GemmArgs& g, const Descriptors& s, cublasLtMatmulAlgo_t* algo,
                bool* from_file) {
  *from_file = false;
  if (ctx->gemm_algos == nullptr) ctx->gemm_algos = new AlgoCache();
  auto& algos = static_cast<AlgoCache*>(ctx->gemm_algos)->algos;
  const AlgoKey key = key_of(ctx, g);
  if (auto hit = algos.find(key); hit != algos.end()) {
    *algo = hit->second;
    return NFN_OK;
  }
  auto& refused = static_cast<AlgoCache*>(ctx->gemm_algos)->refused;
  auto no_kernel = [&] {
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: cuBLASLt has no kernel for this GEMM (m=%d n=%d k=%d)", op, g.m,
                g.n, g.k);
  };
  if (refused.count(key) != 0) return no_kernel();
  if (ctx->gemm_tune) {
    bool kept = false;
    NFN_TRY(kept_pick(ctx, op, key, s, algo, &kept));
    if (kept) {
      algos.emplace(key, *algo);
      *from_file = true;
      return NFN_OK;
    }
  }
  cublasLtMatmulHeuristicResult_t picks[kTuneCandidates] = {};
  const int want = ctx->gemm_tune && !ctx->recording ? kTuneCandidates : 1;
  int found = 0;
  const cublasStatus_t heuristic = api.heuristic(static_cast<cublasLtHandle_t>(ctx->cublaslt), s.desc, s.a, s.b,
                                                 s.d, s.d, s.pref, want, picks, &found);
  // A fused epilogue refused in any way (NOT_SUPPORTED, or INVALID_VALUE for a layout its
  // rules exclude) leaves the caller the unfused form; a plain GEMM refused that way is a bug.
  if (heuristic != CUBLAS_STATUS_SUCCESS && heuristic != CUBLAS_STATUS_NOT_SUPPORTED && !refusable(g, heuristic))
    return fail(ctx, NFN_ERR_BACKEND, "%s: cublasLtMatmulAlgoGetHeuristic: %s", op,
                api.status_string(heuristic));
  // Only results whose own state is SUCCESS are usable (cublasLt.h).
  int usable = 0;
  for (int i = 0; heuristic == CUBLAS_STATUS_SUCCESS && i < found; ++i)
    if (picks[i].state == CUBLAS_STATUS_SUCCESS) picks[usable++] = picks[i];
  found = usable;
  if (heuristic != CUBLAS_STATUS_SUCCESS || found == 0) {
    refused.insert(key);
    return no_kernel();
  }
  *algo = picks[0].algo;
  if (found > 1) {
    bool timed = false;
    NFN_TRY(fastest(ctx, op, g, picks, found, algo, &timed));
    if (timed) keep_pick(ctx, key, *algo);
  }
  // With gemm_tune, a pick made inside a graph recording was not timed (nothing is, while
  // capturing): not cached, so the shape's next call outside a recording times and keeps it.
  if (!(ctx->gemm_tune && ctx->recording)) algos.emplace(key, *algo);
  return NFN_OK;
}

}  // namespace

nfn_status check_gemm_descriptors(nfn_ctx* ctx, const char* op, const GemmArgs& g) {
  NFN_TRY(load(ctx, op));
  NFN_TRY(check_gelu_aux(ctx, op, g));
  Descriptors s;
  return describe(ctx, op, g, &s);
}

nfn_status gemm(nfn_ctx* ctx, const char* op, const GemmArgs& g) {
  NFN_TRY(load(ctx, op));
  if (g.m == 0 || g.n == 0) return NFN_OK;
  NFN_TRY(check_gelu_aux(ctx, op, g));
  NFN_TRY(check_gemm_setup(ctx, op));
  if (ctx->cublaslt == nullptr) {
    // The workspace first: a context never holds a handle without it.
    if (ctx->gemm_workspace == nullptr) NFN_CUDA_TRY(ctx, cudaMalloc(&ctx->gemm_workspace, kGemmWorkspaceBytes), op);
    cublasLtHandle_t handle = nullptr;
    cublasStatus_t st = api.create(&handle);
    if (st != CUBLAS_STATUS_SUCCESS)
      return fail(ctx, NFN_ERR_BACKEND, "%s: cublasLtCreate: %s", op, api.status_string(st));
    ctx->cublaslt = handle;
  }
  Descriptors s;
  NFN_TRY(describe(ctx, op, g, &s));
  cublasLtMatmulAlgo_t algo;
  bool from_file = false;
  NFN_TRY(pick(ctx, op, g, s, &algo, &from_file));
  const float alpha = 1.f, beta = g.beta;
  const void* c = g.c != nullptr ? g.c : g.d;
  auto matmul = [&] {
    return api.matmul(static_cast<cublasLtHandle_t>(ctx->cublaslt), s.desc, &alpha, g.a, s.a, g.b, s.b, &beta, c, s.d,
                      g.d, s.d, &algo, ctx->gemm_workspace, kGemmWorkspaceBytes, ctx->stream);
  };
  cublasStatus_t st = matmul();
  if (st != CUBLAS_STATUS_SUCCESS && from_file) {
    // A kept kernel that cublasLtMatmulAlgoCheck accepted but the matmul refuses (the check
    // does not promise it runs): dropped from the file, and picked again.
    (void)cudaGetLastError();
    forget_pick(ctx, key_of(ctx, g));
    NFN_TRY(pick(ctx, op, g, s, &algo, &from_file));
    st = matmul();
  }
  if (refusable(g, st)) {
    // A fused epilogue the heuristic offered but the kernel refuses: nothing ran, and the
    // caller runs the unfused form (now and for this key from now on).
    auto* cache = static_cast<AlgoCache*>(ctx->gemm_algos);
    cache->algos.erase(key_of(ctx, g));
    cache->refused.insert(key_of(ctx, g));
    return fail(ctx, NFN_ERR_UNSUPPORTED, "%s: cublasLtMatmul: %s", op, api.status_string(st));
  }
  if (st != CUBLAS_STATUS_SUCCESS) return fail(ctx, NFN_ERR_BACKEND, "%s: cublasLtMatmul: %s", op, api.status_string(st));
  return NFN_OK;
}

void gemm_release(nfn_ctx* ctx) {
  if (ctx->cublaslt != nullptr) api.destroy(static_cast<cublasLtHandle_t>(ctx->cublaslt));
  if (ctx->gemm_workspace != nullptr) cudaFree(ctx->gemm_workspace);
  delete static_cast<AlgoCache*>(ctx->gemm_algos);
  delete static_cast<TunedPicks*>(ctx->tuned_picks);
  ctx->tuned_picks = nullptr;
  ctx->cublaslt = nullptr;
  ctx->gemm_workspace = nullptr;
  ctx->gemm_algos = nullptr;
}

#endif  // NFN_HAVE_CUBLASLT

}  // namespace nfn::cuda
