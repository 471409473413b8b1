// The CUDA emulator's runtime: kernels run block after block on the calling thread, each
// thread of a block on its own fiber (fiber.h). A fiber runs until it reaches a rendezvous
// (__syncthreads, a warp shuffle, mma.sync, ldmatrix) and waits there until every live
// thread of its block, or of its warp, has arrived, so kernels see the ordering guarantees
// CUDA gives and no more: a read of shared memory another thread writes without a barrier
// between sees stale or poisoned data (cp.async copies land late or early, see cp_async).
// Threads stuck at different rendezvous are reported as a deadlock.
//
// Device memory is host memory with a PROT_NONE page right after each allocation (rounded
// to 32 bytes), poisoned with 0xff bytes (NaN in f32 and bf16), so reading past the end or
// reading what nothing wrote shows up; each block's shared memory is poisoned the same way.
// A fault names the kernel, block and thread.
//
// Blocks run first to last, or last to first (nfn_emu_reverse_order, which also schedules
// each block's threads from the other end): a result that differs between the two orders
// depends on the order blocks run in, which a GPU does not fix (a float atomicAdd, a block
// reading another's output). What this cannot show: timing, performance, races between
// blocks that need them to overlap, memory-model subtleties, and whether nvcc compiles the
// code (CI does that).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/emu/include/cuda_bf16.h"
#include "cuda/emu/fiber.h"
#include "cuda/emu/include/cuda_runtime.h"

namespace nfn_emu {

thread_local ThreadPlace place;

namespace {

constexpr size_t kStackBytes = 128u << 10;
constexpr size_t kMaxSharedOptIn = 227u << 10;  // sm_90's per-block opt-in limit
// The per-block opt-in limit of the emulated device: sm_90's unless nfn_emu_shared_optin set
// another (sm_120's 99 KiB, say).
size_t max_shared_optin = kMaxSharedOptIn;
constexpr size_t kDefaultSharedLimit = 48u << 10;

enum class Wait { none, block, warp, done };

// A cp.async copy in flight: its 16 bytes (read from global memory when issued) land in
// shared memory only when a cp.async.wait_group covers their group.
struct AsyncCopy {
  char* dst;
  unsigned char bytes[16];
};

struct Fiber {
  FiberContext ctx;
  uint3 thread;
  int warp = 0, lane = 0;
  Wait wait = Wait::none;
  unsigned gen = 0;  // the generation of the barrier it waits at
  bool pdl_begun = false;  // called pdl_begin
  std::vector<AsyncCopy> copies;  // issued, not yet landed, oldest first
  std::vector<size_t> groups;     // committed groups: where each ends in `copies`
};

struct Warp {
  int size = 0, live = 0, arrived = 0;
  unsigned gen = 0;
  // Double-buffered by generation parity: a lane cannot reach the exchange after next
  // before every lane has read this one.
  uint64_t slots[2][32];
  uint32_t a[2][32][4], b[2][32][2];
  const char* rows[2][32];  // ldmatrix row addresses
};

struct Block {
  const char* kernel = "";
  uint3 index{0, 0, 0};
  dim3 block_dim, grid_dim;
  void (*thunk)(void*) = nullptr;
  void* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0, arrived = 0, current = -1;
  unsigned gen = 0;
  unsigned releases = 0;  // barriers released so far (the scheduler rescans after one)
  FiberContext scheduler;
  char* shared = nullptr;  // dynamic shared memory, shared_bytes of it
  size_t shared_bytes = 0;
  bool pdl_ready = false;  // launched by launch_kernel: pdl_begin comes first (LaunchConfig)
  std::vector<std::pair<const void*, size_t>> statics;  // static __shared__ variable -> offset
  size_t static_used = 0;
};

thread_local Block* running = nullptr;
// nfn_emu_reverse_order: blocks run last to first, and each block's threads are scheduled
// from the other end, so a result that depends on the order blocks run in (a float atomicAdd,
// one block reading what another writes) changes between the two orders.
bool reversed = false;
thread_local cudaError_t last_error = cudaSuccess;
// Stream capture, in global mode (one at a time, and work a capture cannot hold fails
// wherever it is issued): the work recorded so far, and whether something has invalidated
// it. A graph is the recorded work; launching it runs the work again, `replaying`.
// Other streams join a capture by waiting on an event recorded in it (a fork), and must
// rejoin it before it ends: the origin stream waits on an event recorded on them after their
// last work (a join), or the end fails, as CUDA's does (cudaErrorStreamCaptureUnjoined).
struct Capture {
  cudaStream_t stream = nullptr;
  std::vector<std::function<void()>> work;
  bool invalid = false;
  std::map<cudaStream_t, uint64_t> issued;    // each stream in the capture: work it issued
  std::map<cudaStream_t, uint64_t> rejoined;  // each other stream: its work the origin waited for
};
std::unique_ptr<Capture> capture;
bool replaying = false;
thread_local std::vector<char*> stacks;  // kStackBytes each, a guard page below
thread_local std::vector<char> shared_buffer;
alignas(256) thread_local char static_buffer[kDefaultSharedLimit];
thread_local size_t static_dirty = kDefaultSharedLimit;  // bytes of it written since poisoned
std::mutex shared_limits_mutex;
std::map<std::string, size_t> shared_limits;  // kernel name -> raised dynamic shared limit

size_t shared_limit(const char* kernel) {
  std::lock_guard<std::mutex> lock(shared_limits_mutex);
  auto it = shared_limits.find(kernel);
  return it == shared_limits.end() ? kDefaultSharedLimit : it->second;
}

[[noreturn]] void die(const char* fmt, ...) {
  char msg[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, args);
  va_end(args);
  if (running != nullptr && running->current >= 0) {
    const Fiber& f = running->fibers[running->current];
    std::fprintf(stderr, "nfn_emu: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n", running->kernel,
                 running->index.x, running->index.y, running->index.z, f.thread.x, f.thread.y, f.thread.z, msg);
  } else {
    std::fprintf(stderr, "nfn_emu: %s\n", msg);
  }
  std::abort();
}

// NFN_EMU_TRACE=path appends one line per runtime event: "launch GX,GY,GZ BX,BY,BZ SMEM NAME",
// "sync", "copy KIND BYTES", "memset BYTES", "malloc BYTES", "free"; for graphs "capture
// NODES" (a capture ended), "graph NODES" (a graph launched) and "replay ..." for each kernel
// a graph runs, so "launch" lines are the kernels the host launched one by one. Tests read it
// to see what a step does (how many launches, whether it allocates or synchronizes).
void trace(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void trace(const char* fmt, ...) {
  static std::mutex mutex;
  static FILE* file = [] {
    const char* path = std::getenv("NFN_EMU_TRACE");
    return path != nullptr && *path != '\0' ? std::fopen(path, "a") : nullptr;
  }();
  if (file == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(file, fmt, args);
  va_end(args);
  std::fputc('\n', file);
  std::fflush(file);
}

void on_fault(int sig) {
  const char* what = sig == SIGILL ? "illegal instruction" : sig == SIGSEGV ? "segmentation fault" : "bus error";
  const char* why = sig == SIGILL ? "a sanitizer trap: a misaligned vector access, an index past a fixed-size "
                                    "array, signed overflow or a bad shift"
                                  : "an access out of bounds of its allocation, or to host memory";
  char msg[512];
  int n;
  if (running != nullptr && running->current >= 0) {
    const Fiber& f = running->fibers[running->current];
    n = std::snprintf(msg, sizeof msg, "nfn_emu: %s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n", what,
                      running->kernel, running->index.x, running->index.y, running->index.z, f.thread.x, f.thread.y,
                      f.thread.z, why);
  } else {
    n = std::snprintf(msg, sizeof msg, "nfn_emu: %s outside any kernel: %s\n", what, why);
  }
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(std::min(n, static_cast<int>(sizeof msg) - 1)));
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    static char alt[1 << 16];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    sigaction(SIGILL, &sa, nullptr);
  });
}

char* stack_for(size_t i) {
  while (stacks.size() <= i) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("cannot map a fiber stack");
    mprotect(p, page, PROT_NONE);  // stacks grow down: overflow faults
    stacks.push_back(static_cast<char*>(p) + page);
  }
  return stacks[i];
}

Fiber& me() { return running->fibers[running->current]; }

// A thread of a launch_kernel launch reaching `what` before pdl_begin: on a GPU its kernel
// may then run beside the one before it, reading or writing what that one has not finished.
void require_pdl_begun(const char* what) {
  if (running->pdl_ready && !me().pdl_begun)
    die("%s before pdl_begin() in a kernel launched by launch_kernel (cuda/ops/launch.h)", what);
}

void yield() {
  Fiber& f = me();
  switch_context(&f.ctx, &running->scheduler);
}

// Counts one arrival at a barrier of `live` threads; the last one releases the others.
void arrive(int* arrived, int live, unsigned* gen, Wait kind) {
  require_pdl_begun(kind == Wait::block ? "__syncthreads" : "a warp-wide operation");
  if (++*arrived == live) {
    *arrived = 0;
    ++*gen;
    ++running->releases;
    return;
  }
  Fiber& f = me();
  f.wait = kind;
  f.gen = *gen;
  yield();
}

void fiber_main() {
  Block& b = *running;
  b.thunk(b.body);
  require_pdl_begun("the thread's exit");
  Fiber& f = me();
  if (!f.copies.empty()) die("the thread exited with %zu cp.async copies never waited for", f.copies.size());
  f.wait = Wait::done;
  --b.live;
  Warp& w = b.warps[f.warp];
  if (w.arrived > 0)
    die("a lane exited while %d lanes of its warp wait at a warp shuffle or mma.sync with a full mask", w.arrived);
  --w.live;
  // Exited threads count as arrived, as on the GPU.
  if (b.arrived > 0 && b.arrived == b.live) b.arrived = 0, ++b.gen, ++b.releases;
  if (w.arrived > 0 && w.arrived == w.live) w.arrived = 0, ++w.gen, ++b.releases;
  switch_context(&f.ctx, &b.scheduler);  // never resumed
}

bool runnable(const Block& b, const Fiber& f) {
  switch (f.wait) {
    case Wait::none: return true;
    case Wait::block: return b.gen != f.gen;
    case Wait::warp: return b.warps[f.warp].gen != f.gen;
    default: return false;
  }
}

void run_block(Block& b) {
  const int n = static_cast<int>(b.block_dim.x * b.block_dim.y * b.block_dim.z);
  b.fibers.assign(n, Fiber{});
  b.warps.assign((n + 31) / 32, Warp{});
  b.live = n;
  b.arrived = 0;
  b.gen = 0;
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.thread = uint3{i % b.block_dim.x, (i / b.block_dim.x) % b.block_dim.y, i / (b.block_dim.x * b.block_dim.y)};
    f.warp = i / 32;
    f.lane = i % 32;
    Warp& w = b.warps[f.warp];
    ++w.size;
    ++w.live;
    prepare_context(&f.ctx, stack_for(i), kStackBytes, fiber_main);
  }
  place.block = b.index;
  place.block_dim = b.block_dim;
  place.grid_dim = b.grid_dim;
  // Always the first runnable thread, from the front in even blocks and from the back in
  // odd ones: one warp runs as far ahead of the others as the barriers allow, in both
  // directions, so a shared-memory read or write missing its __syncthreads sees the wrong
  // data instead of passing by luck.
  const bool backwards = ((b.index.x + b.index.y + b.index.z) & 1) != reversed;
  int cursor = 0;  // threads before it are blocked or done, until the next release
  unsigned seen = b.releases;
  while (b.live > 0) {
    if (b.releases != seen) seen = b.releases, cursor = 0;
    int next = -1;
    for (int k = cursor; k < n && next < 0; ++k) {
      const int i = backwards ? n - 1 - k : k;
      if (runnable(b, b.fibers[i])) next = i, cursor = k;
    }
    if (next < 0) {
      if (b.releases != seen) continue;
      int at_block = 0, at_warp = 0;
      for (const Fiber& f : b.fibers) at_block += f.wait == Wait::block, at_warp += f.wait == Wait::warp;
      b.current = 0;
      die("deadlock: %d threads wait at __syncthreads and %d at a warp-wide operation, none can go on",
          at_block, at_warp);
    }
    Fiber& f = b.fibers[next];
    f.wait = Wait::none;
    b.current = next;
    place.thread = f.thread;
    switch_context(&b.scheduler, &f.ctx);
  }
  b.current = -1;
}

}  // namespace

bool valid_launch(const char* name, const LaunchConfig& cfg) {
  const dim3 g = cfg.grid, k = cfg.block;
  const unsigned long long threads = 1ull * k.x * k.y * k.z;
  const bool bad_block = k.x == 0 || k.y == 0 || k.z == 0 || threads > 1024 || k.z > 64;
  const bool bad_grid = g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535;
  if (!bad_block && !bad_grid && cfg.shared_bytes <= shared_limit(name)) return true;
  last_error = cudaErrorInvalidConfiguration;
  if (capture) capture->invalid = true;
  return false;
}

bool capturing() { return capture != nullptr; }

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  if (!capture) {
    work();
    return cudaSuccess;
  }
  if (capture->issued.count(stream) == 0) {
    trace("capture refused %s (a stream outside the capture)", what);
    capture->invalid = true;
    return last_error = cudaErrorStreamCaptureUnsupported;
  }
  ++capture->issued[stream];
  if (!capture->invalid) capture->work.push_back(std::move(work));
  return capture->invalid ? (last_error = cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

void run_kernel(const char* name, const LaunchConfig& cfg, void (*thunk)(void*), void* body) {
  const dim3 g = cfg.grid, k = cfg.block;
  if (!valid_launch(name, cfg)) return;
  install_fault_handler();
  if (running != nullptr) die("kernel %s launched from inside a kernel", name);
  trace("%s %u,%u,%u %u,%u,%u %zu %s", replaying ? "replay" : "launch", g.x, g.y, g.z, k.x, k.y, k.z,
        cfg.shared_bytes, name);
  shared_buffer.resize(cfg.shared_bytes + 256);
  char* shared = shared_buffer.data() + (256 - reinterpret_cast<uintptr_t>(shared_buffer.data()) % 256) % 256;
  Block b;
  b.kernel = name;
  b.block_dim = k;
  b.grid_dim = g;
  b.thunk = thunk;
  b.body = body;
  b.shared = shared;
  b.shared_bytes = cfg.shared_bytes;
  b.pdl_ready = cfg.pdl_ready;
  running = &b;
  const unsigned long long blocks = 1ull * g.x * g.y * g.z;
  for (unsigned long long n = 0; n < blocks; ++n) {
    const unsigned long long i = reversed ? blocks - 1 - n : n;
    b.index = uint3{static_cast<unsigned>(i % g.x), static_cast<unsigned>(i / g.x % g.y),
                    static_cast<unsigned>(i / g.x / g.y)};
    std::memset(shared, 0xff, cfg.shared_bytes);
    std::memset(static_buffer, 0xff, static_dirty);
    static_dirty = 0;
    b.statics.clear();
    b.static_used = 0;
    run_block(b);
  }
  running = nullptr;
}

void* dynamic_shared() {
  if (running == nullptr) die("dynamic shared memory used outside a kernel");
  return running->shared;
}

void* static_shared(const void* key, size_t bytes, size_t align) {
  if (running == nullptr) die("__shared__ variable used outside a kernel");
  Block& b = *running;
  for (const auto& s : b.statics)
    if (s.first == key) return static_buffer + s.second;
  const size_t at = (b.static_used + align - 1) / align * align;
  if (at + bytes > kDefaultSharedLimit)
    die("static shared memory of %zu bytes, over the 48 KiB a block may declare", at + bytes);
  // Without a raised limit, a block's static and dynamic shared memory share the 48 KiB.
  if (shared_limit(b.kernel) == kDefaultSharedLimit && at + bytes + b.shared_bytes > kDefaultSharedLimit)
    die("%zu bytes of static and %zu of dynamic shared memory, over 48 KiB without cudaFuncSetAttribute "
        "raising the kernel's limit", at + bytes, b.shared_bytes);
  b.statics.emplace_back(key, at);
  b.static_used = at + bytes;
  static_dirty = std::max(static_dirty, b.static_used);
  return static_buffer + at;
}

void pdl_begin() {
  if (running == nullptr) die("pdl_begin outside a kernel");
  me().pdl_begun = true;
}

void sync_block() {
  if (running == nullptr) die("__syncthreads outside a kernel");
  arrive(&running->arrived, running->live, &running->gen, Wait::block);
}

void require(bool ok, const char* what) {
  if (!ok) die("%s is not emulated", what);
}

int lane_xor(int lane, int mask) { return lane ^ mask; }
int lane_down(int lane, int delta) { return lane + delta; }

namespace {

Warp& full_warp(const char* what) {
  if (running == nullptr) die("%s outside a kernel", what);
  Warp& w = running->warps[me().warp];
  if (w.live != w.size) die("%s with a full mask after %d lanes of the warp exited", what, w.size - w.live);
  return w;
}

// Whether [p, p + bytes) lies in the running block's static or dynamic shared memory.
bool in_shared(const char* p, size_t bytes) {
  const Block& b = *running;
  return (p >= static_buffer && p + bytes <= static_buffer + kDefaultSharedLimit) ||
         (p >= b.shared && p + bytes <= b.shared + b.shared_bytes);
}

}  // namespace

uint64_t warp_exchange(uint64_t value, int (*source)(int, int), int arg) {
  Warp& w = full_warp("warp shuffle");
  const int buf = w.gen & 1, lane = me().lane;
  w.slots[buf][lane] = value;
  arrive(&w.arrived, w.live, &w.gen, Wait::warp);
  const int src = source(lane, arg);
  return src < 0 || src >= w.size ? value : w.slots[buf][src];
}

// The PTX ISA's m16n8k16 fragments, with g = lane / 4, t = lane % 4, two bf16 per register
// (lower index in the low half): A register r holds row g + 8 (r & 1), columns
// 2t + 8 (r >> 1) + {0, 1}; B register r holds rows k = 2t + 8r + {0, 1} of column g; C/D
// element i is row g + 8 (i >> 1), column 2t + (i & 1).
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  Warp& w = full_warp("mma.sync");
  if (w.size != 32) die("mma.sync in a warp of %d threads", w.size);
  const int buf = w.gen & 1, lane = me().lane;
  std::memcpy(w.a[buf][lane], a, sizeof a);
  std::memcpy(w.b[buf][lane], b, sizeof b);
  arrive(&w.arrived, w.live, &w.gen, Wait::warp);
  auto half = [](uint32_t reg, int k) {
    __nv_bfloat16 h{static_cast<uint16_t>(reg >> (16 * (k & 1)))};
    return __bfloat162float(h);
  };
  auto a_at = [&](int row, int k) {
    const int src = (row & 7) * 4 + ((k & 7) >> 1), reg = (row >> 3) + 2 * (k >> 3);
    return half(w.a[buf][src][reg], k);
  };
  auto b_at = [&](int k, int col) {
    const int src = col * 4 + ((k & 7) >> 1), reg = k >> 3;
    return half(w.b[buf][src][reg], k);
  };
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += a_at(row, k) * b_at(k, col);
    d[i] = acc;
  }
}

// The PTX ISA's ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: lanes 8i..8i+7
// give the addresses of rows 0..7 of matrix i (16 bytes each, 16-byte aligned, in shared
// memory); register i of lane l gets from matrix i the 16-bit values at (row l / 4, columns
// 2 (l % 4), + 1), or with .trans at (rows 2 (l % 4), + 1, column l / 4), the first in the
// low half.
void ldmatrix(uint32_t* regs, int count, bool trans, const void* row) {
  Warp& w = full_warp("ldmatrix");
  if (w.size != 32) die("ldmatrix in a warp of %d threads", w.size);
  if (count != 1 && count != 2 && count != 4) die("ldmatrix .x%d", count);
  const int buf = w.gen & 1, lane = me().lane;
  const char* p = static_cast<const char*>(row);
  if (lane < 8 * count) {  // the lanes whose addresses are used
    if (!in_shared(p, 16)) die("ldmatrix row address %p is not in this block's shared memory", row);
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) die("ldmatrix row address %p is not 16-byte aligned", row);
  }
  w.rows[buf][lane] = p;
  arrive(&w.arrived, w.live, &w.gen, Wait::warp);
  auto value = [&](int matrix, int r, int c) {
    uint16_t v;
    std::memcpy(&v, w.rows[buf][8 * matrix + r] + 2 * c, 2);
    return static_cast<uint32_t>(v);
  };
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < count; ++i)
    regs[i] = trans ? value(i, 2 * t, g) | value(i, 2 * t + 1, g) << 16
                    : value(i, g, 2 * t) | value(i, g, 2 * t + 1) << 16;
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: src_bytes (16 or 0) are read now,
// the rest of the 16 are zeros. A GPU lands the copy at any time between the issue and the
// wait that covers it; the emulator takes the two ends: in forward order at that wait (a
// read before the wait sees old data), in reverse order at once (a copy issued before every
// thread is done reading the old contents overwrites them).
void cp_async(void* dst, const void* src, int src_bytes) {
  if (running == nullptr) die("cp.async outside a kernel");
  require_pdl_begun("cp.async");
  char* d = static_cast<char*>(dst);
  if (!in_shared(d, 16)) die("cp.async destination %p is not in this block's shared memory", dst);
  if (reinterpret_cast<uintptr_t>(d) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
    die("cp.async of 16 bytes from %p to %p: both must be 16-byte aligned", src, dst);
  if (src_bytes != 0 && src_bytes != 16) die("cp.async with src-size %d (not emulated)", src_bytes);
  if (src_bytes != 0 && !inside_device(src, 16)) die("cp.async source %p is not inside a device allocation", src);
  AsyncCopy c{d, {}};
  if (src_bytes != 0) std::memcpy(c.bytes, src, 16);
  if (reversed)
    std::memcpy(d, c.bytes, 16);
  else
    me().copies.push_back(c);
}

void cp_async_commit() {
  if (running == nullptr) die("cp.async.commit_group outside a kernel");
  Fiber& f = me();
  f.groups.push_back(f.copies.size());
}

// cp.async.wait_group n: every committed group but the newest n has landed.
void cp_async_wait(int n) {
  if (running == nullptr) die("cp.async.wait_group outside a kernel");
  Fiber& f = me();
  if (static_cast<int>(f.groups.size()) <= n) return;
  const size_t done = f.groups[f.groups.size() - 1 - n];
  for (size_t i = 0; i < done; ++i) std::memcpy(f.copies[i].dst, f.copies[i].bytes, 16);
  f.copies.erase(f.copies.begin(), f.copies.begin() + static_cast<std::ptrdiff_t>(done));
  f.groups.erase(f.groups.begin(), f.groups.end() - n);
  for (size_t& end : f.groups) end -= done;
}

cudaError_t set_max_dynamic_shared(const char* kernel, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > max_shared_optin) return last_error = cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(shared_limits_mutex);
  shared_limits[kernel] = std::max(kDefaultSharedLimit, static_cast<size_t>(bytes));
  return cudaSuccess;
}

}  // namespace nfn_emu

// ---- the runtime API ----

namespace {

struct Allocation {
  char* map;          // the mapping (data, then one PROT_NONE page)
  size_t map_bytes;
  size_t bytes;       // what was asked for
};

std::mutex allocations_mutex;
std::map<uintptr_t, Allocation> allocations;  // by data address

// The entry of `m` (start address -> allocation) whose [start, start + size) holds
// [p, p + bytes), or null.
template <typename V, typename Size>
const V* holding(const std::map<uintptr_t, V>& m, const void* p, size_t bytes, Size size) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  return a + bytes <= it->first + size(it->second) ? &it->second : nullptr;
}

// The allocation holding [p, p + bytes), or null.
const Allocation* device_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  return holding(allocations, p, bytes, [](const Allocation& x) { return x.bytes; });
}

bool is_device(const void* p) { return device_range(p, 0) != nullptr; }

}  // namespace

bool nfn_emu::inside_device(const void* p, size_t bytes) { return device_range(p, bytes) != nullptr; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

// The emulated device stands in for a driver and runtime of CUDA 13.0.
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return nfn_emu::last_error = cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(nfn_emu::max_shared_optin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(nfn_emu::max_shared_optin + (1u << 10));
      break;
    default: return nfn_emu::last_error = cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return nfn_emu::last_error = cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "nfn CUDA emulator");
  prop->major = 9;
  prop->multiProcessorCount = 132;  // an H200's, so grids sized by it are the H200's
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetLastError() {
  const cudaError_t e = nfn_emu::last_error;
  nfn_emu::last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined: return "capture ended with streams whose work it has not rejoined";
  }
  return "unknown error";
}

namespace {

// Work issued during a capture that a graph cannot hold (global mode: wherever it is
// issued): it fails and invalidates the capture, so ending it fails too.
bool refused_in_capture(const char* what) {
  if (!nfn_emu::capture) return false;
  nfn_emu::trace("capture refused %s", what);
  nfn_emu::capture->invalid = true;
  nfn_emu::last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (refused_in_capture("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
  nfn_emu::trace("malloc %zu", bytes);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // 32-byte aligned and ending as close to the guard page as that allows. cudaMalloc gives
  // 256; the widest access of ours is 32 bytes (Pack<float, 8>), so an offset misaligned for
  // it is misaligned here as it would be on a GPU, and a 16-byte alignment would fault on
  // one that a GPU runs (scratch carved at 256-byte offsets).
  if (bytes > SIZE_MAX / 2) return nfn_emu::last_error = cudaErrorMemoryAllocation;  // rounding would wrap
  const size_t data = (std::max<size_t>(bytes, 1) + 31) / 32 * 32;
  const size_t map_bytes = (data + page - 1) / page * page + page;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nfn_emu::last_error = cudaErrorMemoryAllocation;
  char* base = static_cast<char*>(m);
  char* guard = base + map_bytes - page;
  mprotect(guard, page, PROT_NONE);
  char* p = guard - data;
  std::memset(p, 0xff, data);
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{base, map_bytes, bytes};
  }
  *ptr = p;
  return cudaSuccess;
}

// Inside a capture CUDA would record an allocation node; nfn's graphs must not allocate
// (nfn_ops.def), so the emulator refuses it there, stricter than CUDA.
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) { return cudaMalloc(ptr, bytes); }

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (refused_in_capture("cudaFree")) return cudaErrorStreamCaptureUnsupported;
  nfn_emu::trace("free");
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    auto it = allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations.end()) return nfn_emu::last_error = cudaErrorInvalidValue;
    a = it->second;
    allocations.erase(it);
  }
  munmap(a.map, a.map_bytes);  // later use of the pointer faults (until the range is reused)
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }

namespace {

std::map<uintptr_t, size_t> pinned;  // page-locked host allocations: start -> bytes

// A copy between page-locked memory and the device, issued and not yet waited for. On a GPU
// it runs later: an upload reads its source then, a download writes its destination then.
// `bytes` is what the source held when the copy was issued (the emulator ran everything
// before it already, so for a download these are the bytes the GPU would write).
struct PendingCopy {
  uint64_t seq;       // issue order, against which events are recorded
  bool upload;        // host to device (else device to host)
  char* host;         // the page-locked side
  std::vector<char> bytes;
};
std::vector<PendingCopy> pending_copies;
uint64_t copies_issued = 0;

bool is_pinned(const void* p, size_t bytes) {
  return holding(pinned, p, bytes, [](size_t n) { return n; }) != nullptr;
}

// At a synchronize, or an event wait that covers them (issued before `upto`): every upload
// must still find what it saw when issued, else a GPU could have copied what the host wrote
// afterwards; every download lands.
void complete_pending_copies(const char* at, uint64_t upto = UINT64_MAX) {
  std::vector<PendingCopy> later;
  for (PendingCopy& c : pending_copies) {
    if (c.seq >= upto) {
      later.push_back(std::move(c));
    } else if (!c.upload) {
      std::memcpy(c.host, c.bytes.data(), c.bytes.size());
    } else if (std::memcmp(c.host, c.bytes.data(), c.bytes.size()) != 0) {
      nfn_emu::die("the host wrote page-locked memory at %p that a copy to the device issued before %s "
                   "had not yet read (%zu bytes): wait for the stream before reusing the buffer",
                   static_cast<const void*>(c.host), at, c.bytes.size());
    }
  }
  pending_copies = std::move(later);
}

}  // namespace

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (refused_in_capture("cudaMallocHost")) return cudaErrorStreamCaptureUnsupported;
  if (bytes > SIZE_MAX / 2) return nfn_emu::last_error = cudaErrorMemoryAllocation;  // rounding would wrap
  *ptr = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (*ptr == nullptr) return nfn_emu::last_error = cudaErrorMemoryAllocation;
  pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (refused_in_capture("cudaFreeHost")) return cudaErrorStreamCaptureUnsupported;
  complete_pending_copies("cudaFreeHost");  // cudaFreeHost waits for the device
  if (pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return nfn_emu::last_error = cudaErrorInvalidValue;
  std::free(ptr);
  return cudaSuccess;
}

// Copies are checked as the GPU would fault: device sides must lie inside one allocation,
// host sides outside every one.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  static const char* const kinds[] = {"host_to_host", "host_to_device", "device_to_host", "device_to_device"};
  // nfn's host memory is pageable, which a graph's copy node cannot use.
  if (kind != cudaMemcpyDeviceToDevice && refused_in_capture("cudaMemcpyAsync to or from host memory"))
    return cudaErrorStreamCaptureUnsupported;
  if (!nfn_emu::capturing()) nfn_emu::trace("copy %s %zu", kinds[kind & 3], bytes);
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_ok = dst_device ? device_range(dst, bytes) != nullptr : !is_device(dst);
  const bool src_ok = src_device ? device_range(src, bytes) != nullptr : !is_device(src);
  if (!dst_ok || !src_ok) {
    std::fprintf(stderr, "nfn_emu: cudaMemcpyAsync of %zu bytes (kind %d): %s is not %s\n", bytes,
                 static_cast<int>(kind), !dst_ok ? "dst" : "src",
                 (!dst_ok ? dst_device : src_device) ? "inside one device allocation" : "host memory");
    return nfn_emu::last_error = cudaErrorInvalidValue;
  }
  if (!nfn_emu::capturing()) {
    const char* s = static_cast<const char*>(src);
    if (kind == cudaMemcpyHostToDevice && is_pinned(src, bytes))
      pending_copies.push_back({copies_issued++, true, const_cast<char*>(s), std::vector<char>(s, s + bytes)});
    if (kind == cudaMemcpyDeviceToHost && is_pinned(dst, bytes)) {
      pending_copies.push_back({copies_issued++, false, static_cast<char*>(dst), std::vector<char>(s, s + bytes)});
      std::memset(dst, 0xff, bytes);  // not there yet
      return cudaSuccess;
    }
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  return nfn_emu::enqueue(stream, "copy", [dst, src, bytes] {
    if (device_range(dst, bytes) == nullptr || device_range(src, bytes) == nullptr)
      nfn_emu::die("a graph copies %zu bytes to or from memory freed since it was captured", bytes);
    nfn_emu::trace("replay copy device_to_device %zu", bytes);
    std::memmove(dst, src, bytes);
  });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (device_range(dst, bytes) == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  return nfn_emu::enqueue(stream, "memset", [dst, value, bytes] {
    if (device_range(dst, bytes) == nullptr)
      nfn_emu::die("a graph sets %zu bytes of memory freed since it was captured", bytes);
    nfn_emu::trace("%smemset %zu", nfn_emu::replaying ? "replay " : "", bytes);
    std::memset(dst, value, bytes);
  });
}

struct nfn_emu_stream {
  unsigned flags;
};

// An event: the record it marks (0: never recorded) and the copies issued before it.
struct nfn_emu_event {
  uint64_t record = 0;
  uint64_t copies_before = 0;
  // Recorded inside a capture: which capture, on which stream, after how much of its work.
  const void* capture = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t issued = 0;
};

namespace {

uint64_t records = 0;            // event records so far
uint64_t completed_records = 0;  // records a wait or synchronize has covered

}  // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new nfn_emu_event;
  return cudaSuccess;
}

// Inside a capture an event marks a point of a captured stream, for other streams to wait on
// (a fork or a join); outside, a point the host may wait for.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (nfn_emu::capture) {
    auto& c = *nfn_emu::capture;
    if (c.issued.count(stream) == 0) {
      nfn_emu::trace("capture refused cudaEventRecord (a stream outside the capture)");
      c.invalid = true;
      return nfn_emu::last_error = cudaErrorStreamCaptureUnsupported;
    }
    event->capture = &c, event->stream = stream, event->issued = c.issued[stream];
    nfn_emu::trace("event record (captured)");
    return cudaSuccess;
  }
  event->capture = nullptr;
  event->record = ++records;
  event->copies_before = copies_issued;
  nfn_emu::trace("event record");
  return cudaSuccess;
}

// Done only once a wait has covered the record: the GPU is taken to be always behind, so a
// host that polls must cope with "not yet" (and never reads a download before waiting).
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (refused_in_capture("cudaEventQuery")) return cudaErrorStreamCaptureUnsupported;
  const bool done = event->record <= completed_records;
  nfn_emu::trace("event query %s", done ? "done" : "busy");
  if (done) return cudaSuccess;
  return nfn_emu::last_error = cudaErrorNotReady;  // as CUDA may: the caller clears it
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (refused_in_capture("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
  complete_pending_copies("the event wait", event->copies_before);
  completed_records = std::max(completed_records, event->record);
  nfn_emu::trace("event wait");
  return cudaSuccess;
}

// Work runs in the order it is issued, so outside a capture a wait has nothing to do. Inside
// one, a stream waiting on an event recorded in it joins the capture, and the origin waiting
// on another stream's event rejoins that stream's work up to the event.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (event == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (!nfn_emu::capture) {
    nfn_emu::trace("stream wait");
    return cudaSuccess;
  }
  auto& c = *nfn_emu::capture;
  if (event->capture != &c) {
    nfn_emu::trace("capture refused cudaStreamWaitEvent (an event recorded outside the capture)");
    c.invalid = true;
    return nfn_emu::last_error = cudaErrorStreamCaptureUnsupported;
  }
  c.issued.emplace(stream, 0);
  if (stream == c.stream && event->stream != c.stream)
    c.rejoined[event->stream] = std::max(c.rejoined[event->stream], event->issued);
  nfn_emu::trace("stream wait (captured)");
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new nfn_emu_stream{flags};
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  if (refused_in_capture("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
  complete_pending_copies("the synchronize");
  completed_records = records;
  nfn_emu::trace("sync");
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (nfn_emu::capture && nfn_emu::capture->stream == stream) nfn_emu::capture.reset();
  delete stream;
  return cudaSuccess;
}

struct nfn_emu_graph {
  std::shared_ptr<const std::vector<std::function<void()>>> work;
};

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (nfn_emu::capture || mode != cudaStreamCaptureModeGlobal) return nfn_emu::last_error = cudaErrorInvalidValue;
  nfn_emu::capture = std::make_unique<nfn_emu::Capture>();
  nfn_emu::capture->stream = stream;
  nfn_emu::capture->issued[stream] = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!nfn_emu::capture || nfn_emu::capture->stream != stream) return nfn_emu::last_error = cudaErrorInvalidValue;
  std::unique_ptr<nfn_emu::Capture> done = std::move(nfn_emu::capture);
  if (done->invalid) return nfn_emu::last_error = cudaErrorStreamCaptureInvalidated;
  for (const auto& [other, issued] : done->issued)
    if (other != stream && issued > done->rejoined[other]) {
      nfn_emu::trace("capture unjoined: a stream's last %llu items were not waited for",
                     static_cast<unsigned long long>(issued - done->rejoined[other]));
      return nfn_emu::last_error = cudaErrorStreamCaptureUnjoined;
    }
  nfn_emu::trace("capture %zu", done->work.size());
  *graph = new nfn_emu_graph{std::make_shared<const std::vector<std::function<void()>>>(std::move(done->work))};
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  *exec = new nfn_emu_graph{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  if (exec == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (refused_in_capture("cudaGraphLaunch (a graph inside a capture is not emulated)"))
    return cudaErrorStreamCaptureUnsupported;
  nfn_emu::trace("graph %zu", exec->work->size());
  nfn_emu::replaying = true;
  for (const auto& work : *exec->work) work();
  nfn_emu::replaying = false;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// Exported from every library built on the emulator, found with dlsym: the op parity suite
// runs each case in both orders and requires bitwise-equal results (determinism).
extern "C" __attribute__((visibility("default"))) void nfn_emu_reverse_order(int on) {
  nfn_emu::reversed = on != 0;
}

// Exported like nfn_emu_reverse_order: emulate a device whose blocks may opt in to at most
// `bytes` of shared memory (0: sm_90's 227 KiB). The parity suite runs flash_mma under
// sm_120's 99 KiB too, where dq at head size 128 takes its single-buffered form.
extern "C" __attribute__((visibility("default"))) void nfn_emu_shared_optin(int bytes) {
  nfn_emu::max_shared_optin = bytes > 0 ? static_cast<size_t>(bytes) : nfn_emu::kMaxSharedOptIn;
}
