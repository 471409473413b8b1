// The slice of the CUDA runtime and device language that nfn's kernels use, for running
// them on the CPU (cuda/emu). Force-included into every emulated source, as nvcc does with
// the real cuda_runtime.h. Kernels become plain functions; each thread of a block runs on
// its own fiber, so __syncthreads, warp shuffles and mma.sync are real rendezvous between
// threads (see runtime.cc). Launches `k<<<grid, block, smem, stream>>>(args)` are rewritten
// to nfn_emu::launch(...) by rewrite_cu.py before compilation.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// rewrite_cu.py turns every __shared__ declaration into a call to nfn_emu::static_shared or
// nfn_emu::dynamic_shared; one left over does not compile.
#define __shared__ __shared___declaration_not_rewritten_by_rewrite_cu_py

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.f / x; }  // the reciprocal, rounded to nearest even

// CUDA's global min and max.
#define NFN_EMU_MIN_MAX(T)                              \
  inline T min(T a, T b) { return b < a ? b : a; }     \
  inline T max(T a, T b) { return a < b ? b : a; }
NFN_EMU_MIN_MAX(int)
NFN_EMU_MIN_MAX(unsigned)
NFN_EMU_MIN_MAX(long)
NFN_EMU_MIN_MAX(unsigned long)
NFN_EMU_MIN_MAX(long long)
NFN_EMU_MIN_MAX(unsigned long long)
#undef NFN_EMU_MIN_MAX

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnjoined = 904,
} cudaError_t;

typedef struct nfn_emu_stream* cudaStream_t;
constexpr unsigned cudaStreamNonBlocking = 1;

// Graphs (runtime.cc): stream capture records the work issued on the stream instead of
// running it; a graph launch runs the recording again.
typedef struct nfn_emu_graph* cudaGraph_t;
typedef struct nfn_emu_graph* cudaGraphExec_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

// Events (runtime.cc): a point in the stream the host can wait for. The emulator runs every
// call at once, but answers like a GPU that is always behind: an event is done only once a
// wait covers it, and a copy into page-locked memory lands only then. A timing event keeps
// the host's clock at its record, when everything before it has run.
typedef struct nfn_emu_event* cudaEvent_t;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr {
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
// The fields of cudaDeviceProp nfn reads.
struct cudaDeviceProp {
  char name[256];
  int major, minor;
  int multiProcessorCount;
};

namespace nfn_emu {

// Where the running fiber is in the grid (set by the scheduler before each switch).
struct ThreadPlace {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
};
extern thread_local ThreadPlace place;

// pdl_ready: a launch through cuda/ops/launch.h's launch_kernel, which a GPU may run as a
// programmatic dependent launch: each of its threads must call pdl_begin before any barrier,
// warp-wide operation or cp.async, and before it exits.
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool pdl_ready;
};
inline LaunchConfig launch_config(dim3 grid, dim3 block, size_t shared_bytes = 0,
                                  cudaStream_t stream = nullptr, bool pdl_ready = false) {
  return LaunchConfig{grid, block, shared_bytes, stream, pdl_ready};
}

// Runs `body` once per thread of every block of the grid; an invalid configuration sets the
// error cudaGetLastError returns, as a failed launch does.
void run_kernel(const char* name, const LaunchConfig& cfg, void (*thunk)(void*), void* body);

// Whether a stream capture is in progress (on any stream: captures are in global mode).
bool capturing();

// Work issued on `stream`: run now, or recorded when the stream is being captured. Issuing
// to another stream during a capture fails and invalidates the capture, as CUDA's legacy
// stream would. `what` names the work in errors and the trace.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// Whether `cfg` is a launch configuration the device accepts for kernel `name`.
bool valid_launch(const char* name, const LaunchConfig& cfg);

template <typename F>
void launch(const char* name, const LaunchConfig& cfg, F&& body) {
  using Body = typename std::decay<F>::type;
  auto thunk = [](void* f) { (*static_cast<Body*>(f))(); };
  if (!capturing()) {
    run_kernel(name, cfg, thunk, &body);
    return;
  }
  // A recorded launch keeps a copy of the body: the rewritten launch captures the kernel's
  // arguments by value ([=]), as a real launch copies them into its parameter buffer.
  if (!valid_launch(name, cfg)) return;
  enqueue(cfg.stream, name, [name, cfg, thunk, b = Body(body)]() mutable { run_kernel(name, cfg, thunk, &b); });
}

// This block's dynamic shared memory (the launch's shared_bytes, poisoned per block, 256-byte
// aligned, a guard page at most 255 bytes past its end and canaries between, runtime.cc).
void* dynamic_shared();
// This block's copy of the static __shared__ variable `key` (poisoned per block, canaries
// around it; the static shared memory of a block is limited to 48 KiB, as nvcc enforces).
void* static_shared(const void* key, size_t bytes, size_t align);

// griddepcontrol.wait and .launch_dependents (cuda/ops/launch.h's pdl_begin): the launches
// run one after another, so it only marks the calling thread as having called it.
void pdl_begin();

// Rendezvous of the calling thread with its whole block, or with its warp.
void sync_block();
// Every lane of the warp gives `value` and gets the value of lane source(lane, arg) (its own
// when that is out of the warp).
uint64_t warp_exchange(uint64_t value, int (*source)(int lane, int arg), int arg);

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, a warp-wide rendezvous: every lane
// gives its fragments and gets its own four accumulators back.
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16, a warp-wide rendezvous: every lane
// gives its row address and gets `count` registers (runtime.cc says which values).
void ldmatrix(uint32_t* regs, int count, bool trans, const void* row);

// cp.async.cg.shared.global of 16 bytes (src_bytes 16, or 0 for zeros), commit_group and
// wait_group: a copy lands in shared memory only when a wait covers its group (runtime.cc).
void cp_async(void* dst, const void* src, int src_bytes);
void cp_async_commit();
void cp_async_wait(int newest_pending);

// Stops the run, naming the kernel, block and thread, when `ok` is false.
void require(bool ok, const char* what);

int lane_xor(int lane, int mask);
int lane_down(int lane, int delta);

template <typename T>
T shuffle(T v, int (*source)(int, int), int arg) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(bits, source, arg);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// Whether [p, p + bytes) lies inside one device allocation.
bool inside_device(const void* p, size_t bytes);
// Stops the run, naming `by` as the writer, if a canary around a live device allocation has
// changed (runtime.cc). Called before and after each kernel, and after each emulated GEMM and sort.
void check_device_canaries(const char* by);

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), with the
// kernel named as its launches name it (rewrite_cu.py passes the same text): later launches
// of that kernel may use up to `bytes` (at most sm_90's 227 KiB) of dynamic shared memory.
cudaError_t set_max_dynamic_shared(const char* kernel, int bytes);

}  // namespace nfn_emu

#define threadIdx (::nfn_emu::place.thread)
#define blockIdx (::nfn_emu::place.block)
#define blockDim (::nfn_emu::place.block_dim)
#define gridDim (::nfn_emu::place.grid_dim)

inline void __syncthreads() { nfn_emu::sync_block(); }

// Full-warp shuffles only (all the kernels use): another mask or width stops the run.
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  nfn_emu::require(mask == 0xffffffffu && width == 32, "__shfl_xor_sync with a partial mask or width");
  return nfn_emu::shuffle(v, nfn_emu::lane_xor, lane_mask);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  nfn_emu::require(mask == 0xffffffffu && width == 32, "__shfl_down_sync with a partial mask or width");
  return nfn_emu::shuffle(v, nfn_emu::lane_down, static_cast<int>(delta));
}

// Blocks never run at once, so an atomic is a plain read-modify-write, and a fence has
// nothing to order.
template <typename T>
inline T atomicAdd(T* p, T v) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, unsigned>::value, "atomicAdd of another type");
  const T old = *p;
  *p = old + v;
  return old;
}
inline void __threadfence() {}
// A streaming store (evict first): only a cache hint on a GPU, so a plain store here.
inline void __stcs(uint4* p, uint4 v) { *p = v; }

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
// cudaDevAttrMaxSharedMemoryPerBlockOptin: sm_90's 227 KiB, or what nfn_emu_shared_optin set;
// cudaDevAttrMaxSharedMemoryPerMultiprocessor: 1 KiB more (sm_90's 228, sm_120's 100).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
// "nfn CUDA emulator", compute capability 9.0 (its rules are sm_90's).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
// Page-locked host memory: a copy from it to the device is only queued on a GPU, so the
// emulator checks at the next synchronize (or event wait that covers it) that the host has
// not written the source since; a copy into it lands only at such a wait (until then the
// destination holds 0xff bytes: NaN to a host that reads too early).
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

