#include "tests/cuda/emu/probes.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/ops/attention_mma.cuh"
#include "cuda/ops/launch.h"

extern "C" void nfn_emu_reverse_order(int on);  // cuda/emu/runtime.cc

namespace emu_probe {
namespace {

template <typename T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  cudaMalloc(&p, host.size() * sizeof(T));
  cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, nullptr);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> take(T* dev, size_t n) {
  std::vector<T> host(n);
  cudaMemcpyAsync(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr);
  cudaFree(dev);
  return host;
}

__global__ void shuffle_kernel(int* xor_out, int* down_out) {
  const int t = threadIdx.x;
  xor_out[t] = __shfl_xor_sync(0xffffffffu, 10 * t, 5);
  down_out[t] = __shfl_down_sync(0xffffffffu, t, 3);
}

// The counters are floats: atomicAdd on float is what the emulator provides.
__global__ void order_kernel(float* blocks_run, float* threads_run, int* position, int* first) {
  const int b = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) position[b] = static_cast<int>(atomicAdd(blocks_run, 1.f));
  if (atomicAdd(&threads_run[b], 1.f) == 0.f) first[b] = threadIdx.x;
}

__global__ void rotation_kernel(int* out, bool barrier) {
  __shared__ int s[256];
  const int t = threadIdx.x;
  s[t] = 1000 * blockIdx.x + t;
  if (barrier) __syncthreads();
  out[blockIdx.x * 256 + t] = s[(t + 32) % 256];
}

// A and B staged in shared memory (rows of 16 values: 32 bytes, so every ldmatrix row
// address is 16-byte aligned), then D = A B + C through the kernels' fragment loads.
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, float* d) {
  using namespace nfn::cuda::attention::mma_path;
  __shared__ __align__(16) uint16_t as[16 * 16], bs[16 * 16];
  const int lane = threadIdx.x;
  for (int i = lane; i < 16 * 16; i += 32) as[i] = a[i], bs[i] = b[i];
  __syncthreads();
  uint32_t af[4], bf[2][2];
  load_a(af, as, 16, 0, 0, lane);
  load_b(bf, bs, 16, 0, 0, lane);
  for (int n = 0; n < 2; ++n) {
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = d[c_row(lane, i) * 16 + 8 * n + c_col(lane, i)];
    mma_bf16(acc, af, bf[n]);
    for (int i = 0; i < 4; ++i) d[c_row(lane, i) * 16 + 8 * n + c_col(lane, i)] = acc[i];
  }
}

// One warp's ldmatrix .x4 from a 32 x 8 shared matrix whose element (r, c) is 8 r + c: lane l
// gives row l (row l % 8 of matrix l / 8), or row_bytes bytes into the matrix for lane 5
// (global: lane 5 gives a global address instead).
__global__ void ldmatrix_kernel(uint32_t* out, bool trans, int lane5_bytes, const uint16_t* global) {
  __shared__ __align__(16) uint16_t m[32 * 8];
  const int lane = threadIdx.x;
  for (int c = 0; c < 8; ++c) m[lane * 8 + c] = static_cast<uint16_t>(lane * 8 + c);
  __syncthreads();
  const uint16_t* row = m + lane * 8;
  if (lane == 5) row = global != nullptr ? global : reinterpret_cast<const uint16_t*>(
                                                        reinterpret_cast<const char*>(m) + lane5_bytes);
  uint32_t r[4];
  if (trans)
    ::nfn::cuda::attention::mma_path::ldmatrix_x4<true>(r, row);
  else
    ::nfn::cuda::attention::mma_path::ldmatrix_x4<false>(r, row);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

__global__ void shared_write_kernel(int* out) {
  __shared__ int s[1];
  s[0] = 7;
  out[0] = s[0];
}

__global__ void shared_read_kernel(int* out) {
  __shared__ int s[1];
  out[0] = s[0];
}

__global__ void big_static_shared_kernel(float* out) {
  __shared__ float a[8192], b[4097];
  a[0] = b[0] = 1.f;
  out[0] = a[0] + b[0];
}

__global__ void static_and_dynamic_kernel(float* out) {
  __shared__ float a[32];
  extern __shared__ float dyn[];
  a[0] = dyn[0] = 1.f;
  out[0] = a[0] + dyn[0];
}

__global__ void misaligned_kernel(const uint16_t* p, unsigned* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p + 2);
  out[0] = v.x;
}

__global__ void empty_kernel() {}
__global__ void other_kernel() {}

__global__ void deadlock_kernel() {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    (void)__shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void oob_kernel(float* p) { p[64 + 16] = 1.f; }

__global__ void store_byte_kernel(char* p, int offset) { p[offset] = 1; }
__global__ void store_float_kernel(float* p, int index) { p[index] = 1.f; }

// Block `block`'s thread 0 stores 1 at dynamic shared index `index`.
__global__ void dynamic_store_kernel(unsigned block, int index) {
  extern __shared__ float dyn[];
  if (blockIdx.x == block && threadIdx.x == 0) dyn[index] = 1.f;
}

// Stores through a pointer, which the bounds sanitizer cannot follow, into an 8-float static array.
__global__ void static_store_kernel(int index) {
  __shared__ float s[8];
  float* q = s;
  q[index] = 1.f;
}

// A 16-byte (float4-like) read of a static float array, which only promises float alignment:
// 16 bytes may be misaligned there (the emulator places the array at an odd multiple of 4
// bytes every time).
struct alignas(16) Quad {
  float v[4];
};
__global__ void vector_read_static_kernel(float* out) {
  __shared__ float s[36];
  for (int i = 0; i < 36; ++i) s[i] = static_cast<float>(i);
  *out = reinterpret_cast<const Quad*>(s)[1].v[0];
}

// Every thread writes its bytes of a 33-byte allocation, all of a static array and all of its
// block's dynamic shared memory (floats), then reads them back after a barrier.
__global__ void in_bounds_kernel(char* p, int dynamic_floats, int* sum) {
  extern __shared__ float dyn[];
  __shared__ float s[8];
  const int t = threadIdx.x;
  for (int i = t; i < 33; i += blockDim.x) p[i] = static_cast<char>(i);
  for (int i = t; i < 8; i += blockDim.x) s[i] = 1.f;
  for (int i = t; i < dynamic_floats; i += blockDim.x) dyn[i] = 2.f;
  __syncthreads();
  if (t == 0 && blockIdx.x == 0) {
    float total = 0.f;
    for (int i = 0; i < 8; ++i) total += s[i];
    for (int i = 0; i < dynamic_floats; ++i) total += dyn[i];
    sum[0] = static_cast<int>(total) + p[32];
  }
}

// The bits of an f32 at byte 36 of a 33-byte allocation, a bf16 at byte 34 and an f32 4
// bytes before its start.
__global__ void read_outside_kernel(const char* p, uint32_t* out) {
  uint32_t f = 0;
  uint16_t h = 0;
  std::memcpy(&f, p + 36, 4);
  std::memcpy(&h, p + 34, 2);
  out[0] = f;
  out[1] = h;
  std::memcpy(&f, p - 4, 4);
  out[2] = f;
}

// A kernel for launch_kernel: pdl_begin first (mode 0), never (1), or after a barrier (2).
__global__ void pdl_kernel(int* out, int mode) {
  if (mode == 0) nfn::cuda::pdl_begin();
  if (mode == 2) {
    __syncthreads();
    nfn::cuda::pdl_begin();
  }
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

__global__ void exit_then_shuffle_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

// cp.async in two groups (4 words of src; then 4 zeros, src-size 0), the shared words read
// before any wait, after waiting for all but the newest group, and after waiting for all.
__global__ void cp_async_kernel(const uint32_t* src, uint32_t* out, int mode) {
  using namespace nfn::cuda::attention::mma_path;
  __shared__ __align__(16) uint32_t s[8];
  if (mode == 2) {  // a global destination
    cp_async_16(out, src, true);
    return;
  }
  cp_async_16(s, src, true);
  cp_async_commit();
  cp_async_16(s + 4, src, false);
  cp_async_commit();
  if (mode == 1) return;  // exits with both groups in flight
  for (int i = 0; i < 8; ++i) out[i] = s[i];
  cp_async_wait<1>();
  for (int i = 0; i < 8; ++i) out[8 + i] = s[i];
  cp_async_wait<0>();
  for (int i = 0; i < 8; ++i) out[16 + i] = s[i];
}

}  // namespace

std::vector<uint32_t> cp_async(bool reverse) {
  uint32_t* src = device_copy(std::vector<uint32_t>{11, 22, 33, 44});
  uint32_t* out = device_copy(std::vector<uint32_t>(24, 7));
  nfn_emu_reverse_order(reverse);
  cp_async_kernel<<<1, 1>>>(src, out, 0);
  nfn_emu_reverse_order(0);
  cudaFree(src);
  return take(out, 24);
}

void cp_async_never_waited() {
  uint32_t* src = device_copy(std::vector<uint32_t>{11, 22, 33, 44});
  uint32_t* out = device_copy(std::vector<uint32_t>(24, 7));
  cp_async_kernel<<<1, 1>>>(src, out, 1);
}

void cp_async_to_global() {
  uint32_t* src = device_copy(std::vector<uint32_t>{11, 22, 33, 44});
  uint32_t* out = device_copy(std::vector<uint32_t>(24, 7));
  cp_async_kernel<<<1, 1>>>(src, out, 2);
}

void shuffles(std::vector<int>* xor_out, std::vector<int>* down_out) {
  int* x = device_copy(std::vector<int>(64, -1));
  int* d = device_copy(std::vector<int>(64, -1));
  shuffle_kernel<<<1, 64>>>(x, d);
  *xor_out = take(x, 64);
  *down_out = take(d, 64);
}

std::vector<int> shared_rotation(bool barrier) {
  int* out = device_copy(std::vector<int>(512, -1));
  rotation_kernel<<<2, 256>>>(out, barrier);
  return take(out, 512);
}

void block_order(bool reverse, std::vector<int>* position, std::vector<int>* first_thread) {
  float* blocks_run = device_copy(std::vector<float>(1, 0.f));
  float* threads_run = device_copy(std::vector<float>(6, 0.f));
  int* pos = device_copy(std::vector<int>(6, -1));
  int* first = device_copy(std::vector<int>(6, -1));
  nfn_emu_reverse_order(reverse);
  order_kernel<<<dim3(3, 2), 64>>>(blocks_run, threads_run, pos, first);
  nfn_emu_reverse_order(0);
  cudaFree(blocks_run);
  cudaFree(threads_run);
  *position = take(pos, 6);
  *first_thread = take(first, 6);
}

std::vector<float> mma(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<float>& c) {
  uint16_t* da = device_copy(a);
  uint16_t* db = device_copy(b);
  float* dd = device_copy(c);
  mma_kernel<<<1, 32>>>(da, db, dd);
  cudaFree(da);
  cudaFree(db);
  return take(dd, 16 * 16);
}

std::vector<uint32_t> ldmatrix(bool trans) {
  uint32_t* out = device_copy(std::vector<uint32_t>(32 * 4, 0));
  ldmatrix_kernel<<<1, 32>>>(out, trans, 5 * 16, nullptr);
  return take(out, 32 * 4);
}

void ldmatrix_misaligned() {
  uint32_t* out = device_copy(std::vector<uint32_t>(32 * 4, 0));
  ldmatrix_kernel<<<1, 32>>>(out, false, 5 * 16 + 8, nullptr);
}

void ldmatrix_global() {
  uint32_t* out = device_copy(std::vector<uint32_t>(32 * 4, 0));
  const uint16_t* global = device_copy(std::vector<uint16_t>(8, 0));
  ldmatrix_kernel<<<1, 32>>>(out, false, 0, global);
}

int unwritten_shared() {
  int* out = device_copy(std::vector<int>(1, 0));
  shared_write_kernel<<<1, 1>>>(out);
  shared_read_kernel<<<1, 1>>>(out);
  return take(out, 1)[0];
}

void too_much_static_shared() {
  float* out = device_copy(std::vector<float>(1, 0.f));
  big_static_shared_kernel<<<1, 1>>>(out);
}

void static_and_dynamic_over_48k() {
  float* out = device_copy(std::vector<float>(1, 0.f));
  static_and_dynamic_kernel<<<1, 1, 48 * 1024>>>(out);
}

int launch_error(int threads, int shared, int opt_in, bool* cleared) {
  if (opt_in > 0) cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, opt_in);
  empty_kernel<<<1, threads, shared>>>();
  const int err = cudaGetLastError();
  *cleared = cudaGetLastError() == cudaSuccess;
  return err;
}

int raise_shared_limit(int bytes) {
  return cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

int launch_other_kernel_after_raising() {
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);
  other_kernel<<<1, 32, 100000>>>();
  return cudaGetLastError();
}

void misaligned_vector_load() {
  uint16_t* p = device_copy(std::vector<uint16_t>(64, 1));
  unsigned* out = device_copy(std::vector<unsigned>(1, 0));
  misaligned_kernel<<<1, 1>>>(p, out);
}

int copy_from_64_bytes(int bytes) {
  void* p = nullptr;
  cudaMalloc(&p, 64);
  std::vector<char> host(static_cast<size_t>(bytes));
  const int err = cudaMemcpyAsync(host.data(), p, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, nullptr);
  cudaGetLastError();
  cudaFree(p);
  return err;
}

int malloc_alignment() {
  uintptr_t bits = 0;
  std::vector<void*> all;
  for (int bytes = 1; bytes <= 300; ++bytes) {
    void* p = nullptr;
    cudaMalloc(&p, static_cast<size_t>(bytes));
    bits |= reinterpret_cast<uintptr_t>(p);
    all.push_back(p);
  }
  for (void* p : all) cudaFree(p);
  return static_cast<int>(bits & (~bits + 1));  // the lowest set bit of any pointer
}

int pinned_upload(bool rewrite_after_sync) {
  void *host = nullptr, *dev = nullptr;
  cudaMallocHost(&host, 64);
  cudaMalloc(&dev, 64);
  std::memset(host, 1, 64);
  cudaMemcpyAsync(dev, host, 64, cudaMemcpyHostToDevice, nullptr);
  if (rewrite_after_sync) cudaStreamSynchronize(nullptr);
  std::memset(host, 2, 64);  // before the synchronize (unless rewrite_after_sync): a GPU may copy this
  const int err = cudaStreamSynchronize(nullptr);
  cudaFree(dev);
  cudaFreeHost(host);
  return err;
}

void pinned_rewritten_before_sync() { pinned_upload(false); }

void pinned_download(int* before, int* after, int* query_before, int* query_after) {
  void *host = nullptr, *dev = nullptr;
  cudaMallocHost(&host, 64);
  cudaMalloc(&dev, 64);
  cudaMemsetAsync(dev, 7, 64, nullptr);
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaMemcpyAsync(host, dev, 64, cudaMemcpyDeviceToHost, nullptr);
  cudaEventRecord(e, nullptr);
  *query_before = cudaEventQuery(e);
  cudaGetLastError();
  *before = static_cast<unsigned char*>(host)[63];
  cudaEventSynchronize(e);
  *after = static_cast<unsigned char*>(host)[63];
  *query_after = cudaEventQuery(e);
  cudaEventDestroy(e);
  cudaFree(dev);
  cudaFreeHost(host);
}

int pinned_upload_event(bool record_after_upload) {
  void *host = nullptr, *dev = nullptr;
  cudaMallocHost(&host, 64);
  cudaMalloc(&dev, 64);
  std::memset(host, 1, 64);
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (!record_after_upload) cudaEventRecord(e, nullptr);
  cudaMemcpyAsync(dev, host, 64, cudaMemcpyHostToDevice, nullptr);
  if (record_after_upload) cudaEventRecord(e, nullptr);
  cudaEventSynchronize(e);
  std::memset(host, 2, 64);  // covered by the wait only if the event was recorded after the upload
  const int err = cudaStreamSynchronize(nullptr);
  cudaEventDestroy(e);
  cudaFree(dev);
  cudaFreeHost(host);
  return err;
}

void pinned_rewritten_after_an_earlier_event() { pinned_upload_event(false); }

void deadlock() { deadlock_kernel<<<1, 32>>>(); }

int launch_kernel_pdl(int mode) {
  nfn_ctx ctx;  // its stream: the default one
  int* out = device_copy(std::vector<int>(32, -1));
  nfn::cuda::launch_kernel(&ctx, pdl_kernel, 1, 32, 0, out, mode);
  const std::vector<int> got = take(out, 32);
  return got[31];
}

void pdl_begin_never() { launch_kernel_pdl(1); }
void pdl_begin_after_barrier() { launch_kernel_pdl(2); }

void out_of_bounds() {
  void* p = nullptr;
  cudaMalloc(&p, 64 * sizeof(float));
  oob_kernel<<<1, 1>>>(static_cast<float*>(p));
}

void write_past_allocation() {
  void* p = nullptr;
  cudaMalloc(&p, 33);
  store_byte_kernel<<<1, 1>>>(static_cast<char*>(p), 33);
}

void write_before_allocation() {
  float* p = device_copy(std::vector<float>(64, 0.f));
  store_float_kernel<<<1, 1>>>(p, -1);
}

void host_write_past_allocation() {
  void* p = nullptr;
  cudaMalloc(&p, 33);
  static_cast<char*>(p)[40] = 1;
  cudaFree(p);
}

void host_write_then_launch() {
  void* p = nullptr;
  cudaMalloc(&p, 33);
  static_cast<char*>(p)[40] = 1;
  store_byte_kernel<<<1, 1>>>(static_cast<char*>(p), 0);
}

void vector_read_of_a_float_array() {
  float* out = device_copy(std::vector<float>(1, 0.f));
  vector_read_static_kernel<<<1, 1>>>(out);
}

void write_past_dynamic_shared() { dynamic_store_kernel<<<2, 32, 100>>>(1u, 25); }
void write_past_dynamic_shared_page() { dynamic_store_kernel<<<1, 32, 256>>>(0u, 64); }
void write_before_dynamic_shared() { dynamic_store_kernel<<<1, 32, 100>>>(0u, -1); }
void write_past_static_shared() { static_store_kernel<<<1, 1>>>(8); }

void in_bounds() {
  void* p = nullptr;
  cudaMalloc(&p, 33);
  int* sum = device_copy(std::vector<int>(1, 0));
  const int big = 60000 / 4;  // over 48 KiB, to its limit
  cudaFuncSetAttribute(in_bounds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big * 4);
  for (int floats : {25, big, 0}) {
    in_bounds_kernel<<<2, 64, floats * 4>>>(static_cast<char*>(p), floats, sum);
    if (take(sum, 1)[0] != 8 + 2 * floats + 32) std::abort();
    sum = device_copy(std::vector<int>(1, 0));
  }
  cudaFree(sum);
  cudaFree(p);
}

std::vector<uint32_t> read_outside() {
  void* p = nullptr;
  cudaMalloc(&p, 33);
  uint32_t* out = device_copy(std::vector<uint32_t>(3, 0));
  read_outside_kernel<<<1, 1>>>(static_cast<const char*>(p), out);
  cudaFree(p);
  return take(out, 3);
}

void shuffle_after_exit() {
  int* out = device_copy(std::vector<int>(32, 0));
  exit_then_shuffle_kernel<<<1, 32>>>(out);
}

int capture_fork(bool join, int* outside) {
  cudaStream_t origin = nullptr, side = nullptr, third = nullptr;
  cudaEvent_t fork = nullptr, joined = nullptr;
  cudaStreamCreateWithFlags(&origin, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&third, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
  void* p = nullptr;
  cudaMalloc(&p, 16);
  cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal);
  cudaEventRecord(fork, origin);
  cudaStreamWaitEvent(side, fork, 0);
  cudaMemsetAsync(p, 0, 16, side);
  if (join) {
    cudaEventRecord(joined, side);
    cudaStreamWaitEvent(origin, joined, 0);
  }
  cudaGraph_t graph = nullptr;
  const int ended = cudaStreamEndCapture(origin, &graph);
  (void)cudaGetLastError();
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal);
  *outside = cudaMemsetAsync(p, 0, 16, third);
  cudaStreamEndCapture(origin, &graph);
  (void)cudaGetLastError();
  cudaFree(p);
  for (cudaEvent_t e : {fork, joined}) cudaEventDestroy(e);
  for (cudaStream_t s : {origin, side, third}) cudaStreamDestroy(s);
  return ended;
}

void sort_pairs(const std::vector<int32_t>& keys, std::vector<int32_t>* sorted_keys, std::vector<int32_t>* values) {
  const int n = static_cast<int>(keys.size());
  std::vector<int32_t> iota(keys.size());
  for (int i = 0; i < n; ++i) iota[i] = i;
  int32_t* k = device_copy(keys);
  int32_t* v = device_copy(iota);
  int32_t* ko = device_copy(std::vector<int32_t>(keys.size(), -1));
  int32_t* vo = device_copy(std::vector<int32_t>(keys.size(), -1));
  size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k, ko, v, vo, n);
  void* temp = nullptr;
  cudaMalloc(&temp, temp_bytes);
  cub::DeviceRadixSort::SortPairs(temp, temp_bytes, k, ko, v, vo, n);
  cudaFree(temp);
  cudaFree(k);
  cudaFree(v);
  *sorted_keys = take(ko, keys.size());
  *values = take(vo, keys.size());
}

}  // namespace emu_probe
