// The CUDA emulator's runtime: kernels run block after block on the calling thread, each
// thread of a block on its own fiber (fiber.h). A fiber runs until it reaches a rendezvous
// (__syncthreads, a warp shuffle, mma.sync, ldmatrix) and waits there until every live
// thread of its block, or of its warp, has arrived, so kernels see the ordering guarantees
// CUDA gives and no more: a read of shared memory another thread writes without a barrier
// between sees stale or poisoned data (cp.async copies land late or early, see cp_async).
// Threads stuck at different rendezvous are reported as a deadlock.
//
// Device memory is host memory poisoned with 0xff bytes (NaN in f32 and bf16), so reading
// what nothing wrote shows up. Each allocation is rounded up to 32 bytes and ends at a
// PROT_NONE page; the rounding and the 64 bytes before its start hold a canary (NaN when
// read, like the poison, but not the bytes a stray store of -1 or NaN leaves), checked over
// every live allocation after each kernel, emulated GEMM and sort, and at cudaFree. So a
// write up to 64 bytes before an allocation or into its rounding stops the run naming the
// kernel, the allocation, its size and the first offset changed, and any access further
// past the end faults. Each block's shared memory is poisoned the same way and laid out
// alike (SharedArena): the dynamic shared memory, 256-byte aligned, ends at most 255 bytes
// before a PROT_NONE page, the static variables (aligned as declared and no more) lie below it, and
// every byte from 64 below the lowest up to the guard page that no variable holds is
// canary, checked when the block ends. A fault names the kernel, block and thread; a
// changed canary the kernel (and block, for shared memory), or host code where it changed
// before a launch. Not seen: a write further before a buffer, or far enough to land in
// another buffer or variable, or one that stores the canary's own bytes; which thread wrote
// a canary; and a kernel running on another host thread at the same time may be named for a
// device canary.
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
#include <chrono>
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
// Canary bytes right before each device allocation and each shared-memory variable: wide
// enough for the widest access (32 bytes) at index -1 and -2.
constexpr size_t kCanaryBytes = 64;
// Room below a block's dynamic shared memory for its static variables (48 KiB at most) with
// the canaries and alignment padding between them.
constexpr size_t kStaticRoom = 1u << 20;  // only the pages touched cost memory

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The canary: 0xa5 at even addresses, 0xff at odd ones. An aligned f32 or bf16 read of it is
// a NaN, as the 0xff poison is, yet a stray store of -1 or of NaN's 0xff bytes changes it.
unsigned char canary_byte(const char* at) { return reinterpret_cast<uintptr_t>(at) & 1 ? 0xff : 0xa5; }

void fill_canary(char* begin, const char* end) {
  for (char* c = begin; c < end; ++c) *c = static_cast<char>(canary_byte(c));
}

// The first byte of [begin, end) that is no longer the canary, or null. Compares 8 bytes at a
// time (8 is even, so one word of the pattern fits every step): it runs after every launch.
const char* first_changed(const char* begin, const char* end) {
  uint64_t want = 0;
  for (int k = 0; k < 8; ++k) want |= uint64_t{canary_byte(begin + k)} << (8 * k);
  const char* c = begin;
  for (uint64_t got; end - c >= 8; c += 8) {
    std::memcpy(&got, c, 8);
    if (got != want) break;
  }
  for (; c < end; ++c)
    if (static_cast<unsigned char>(*c) != canary_byte(c)) return c;
  return nullptr;
}

// A mapping whose last page is PROT_NONE, so running off the end of what lies right before
// `guard` faults.
struct Guarded {
  char* map;
  size_t bytes;
  char* guard;
};

// Maps at least `usable` bytes before a PROT_NONE page; false if it cannot.
bool map_guarded(size_t usable, Guarded* g) {
  const size_t page = page_size(), bytes = round_up(usable, page) + page;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  *g = Guarded{static_cast<char*>(m), bytes, static_cast<char*>(m) + bytes - page};
  mprotect(g->guard, page, PROT_NONE);
  return true;
}

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

// A block's dynamic shared memory (key null) or one of its static __shared__ variables.
struct SharedVariable {
  const void* key;
  char* start;
  size_t bytes;
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
  // The dynamic shared memory, then each static __shared__ variable in the order the block
  // declared them, each lower in the arena than the one before (see SharedArena).
  std::vector<SharedVariable> variables;
  char* shared_low = nullptr;  // the lowest canary byte below them
  size_t static_used = 0;  // static bytes as nvcc lays them out, for the 48 KiB limits
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
// One host thread's shared memory, for the blocks it runs one after another: room for the
// static variables, placed downward as a block declares them, each with canaries below and
// above; canaries; the dynamic shared memory, 256-byte aligned and ending as near the guard
// page as that allows; canaries up to the guard page. Every byte from the lowest canary to
// the guard that no variable holds is canary, checked when each block ends.
struct SharedArena {
  Guarded m{};
  ~SharedArena() {
    if (m.map != nullptr) munmap(m.map, m.bytes);
  }
};
thread_local SharedArena arena;
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
                                  : "an access out of bounds of its allocation or of its block's shared memory, "
                                    "or to host memory";
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

// Where a launch's `bytes` of dynamic shared memory start, the arena mapped anew if it is
// too small to hold them with the static room below.
char* dynamic_start(size_t bytes) {
  const size_t need = round_up(bytes, 256) + kStaticRoom;
  if (arena.m.map == nullptr || static_cast<size_t>(arena.m.guard - arena.m.map) < need) {
    if (arena.m.map != nullptr) munmap(arena.m.map, arena.m.bytes);
    arena.m = Guarded{};
    if (!map_guarded(need, &arena.m)) die("cannot map %zu bytes for shared memory", need);
  }
  return arena.m.guard - round_up(bytes, 256);
}

// Before each block: its dynamic shared memory poisoned, canaries around it, no static
// variables yet (each is placed, poisoned and guarded when the block first declares it).
void reset_shared(Block& b) {
  std::memset(b.shared, 0xff, b.shared_bytes);
  fill_canary(b.shared + b.shared_bytes, arena.m.guard);
  b.shared_low = b.shared - kCanaryBytes;
  fill_canary(b.shared_low, b.shared);
  b.variables.assign(1, SharedVariable{nullptr, b.shared, b.shared_bytes});
  b.static_used = 0;
}

// Places a static variable under everything placed so far, with canaries in the alignment
// padding above it and kCanaryBytes below it, and poisons it. Its start is aligned exactly as
// declared and no more (an odd multiple of the alignment, up to 256), whatever its size and
// the variables before it, so a kernel relying on more alignment than it declares always
// traps (a vector access to a float array, say), as it may fault on a GPU.
char* place_static(Block& b, const void* key, size_t bytes, size_t align) {
  const uintptr_t top = reinterpret_cast<uintptr_t>(b.shared_low);
  const uintptr_t floor = reinterpret_cast<uintptr_t>(b.shared) - kStaticRoom;  // mapped (dynamic_start)
  uintptr_t start = top >= bytes ? (top - bytes) / align * align : 0;
  if (align < 256 && start % (2 * align) == 0) start -= align;
  if (start < floor + kCanaryBytes || start > top)
    die("static __shared__ variables with their canaries past the emulator's %zu bytes for them", kStaticRoom);
  char* at = reinterpret_cast<char*>(start);
  fill_canary(at + bytes, b.shared_low);
  std::memset(at, 0xff, bytes);
  b.shared_low = at - kCanaryBytes;
  fill_canary(b.shared_low, at);
  b.variables.push_back(SharedVariable{key, at, bytes});
  return at;
}

// "offset 100 of the 100-byte dynamic shared memory", or of a static variable.
std::string offset_in(const SharedVariable& v, const char* at) {
  char s[128];
  std::snprintf(s, sizeof s, "offset %td of %s %zu-byte %s", at - v.start, v.key ? "a" : "the", v.bytes,
                v.key ? "static __shared__ variable" : "dynamic shared memory");
  return s;
}

// A changed canary byte between the variables `below` and `above` (null: none there, or the
// guard page): either may have run over (an empty one cannot).
[[noreturn]] void shared_written_outside(const Block& b, const char* at, const SharedVariable* below,
                                         const SharedVariable* above) {
  std::string where = below != nullptr ? offset_in(*below, at) : offset_in(*above, at);
  if (below != nullptr && above != nullptr && above->bytes > 0) where += " (or " + offset_in(*above, at) + ")";
  die("kernel %s, block (%u,%u,%u) wrote shared memory outside its variables: %s changed", b.kernel, b.index.x,
      b.index.y, b.index.z, where.c_str());
}

// After each block: every byte from the lowest canary to the guard page that no variable
// holds must still be canary.
void check_shared_canaries(const Block& b) {
  const char* top = arena.m.guard;
  const SharedVariable* above = nullptr;
  for (const SharedVariable& v : b.variables) {
    if (const char* at = first_changed(v.start + v.bytes, top)) shared_written_outside(b, at, &v, above);
    top = v.start;
    above = &v;
  }
  if (const char* at = first_changed(b.shared_low, top)) shared_written_outside(b, at, nullptr, above);
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
  // What the host wrote outside an allocation since the last check is the host's, not this kernel's.
  check_device_canaries(("host code (found at the launch of kernel " + std::string(name) + ")").c_str());
  char* shared = dynamic_start(cfg.shared_bytes);
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
    reset_shared(b);
    run_block(b);
    check_shared_canaries(b);
  }
  running = nullptr;
  check_device_canaries(("kernel " + std::string(name)).c_str());
}

void* dynamic_shared() {
  if (running == nullptr) die("dynamic shared memory used outside a kernel");
  return running->shared;
}

void* static_shared(const void* key, size_t bytes, size_t align) {
  if (running == nullptr) die("__shared__ variable used outside a kernel");
  Block& b = *running;
  for (const SharedVariable& v : b.variables)
    if (v.key == key) return v.start;
  const size_t at = round_up(b.static_used, align);
  if (at + bytes > kDefaultSharedLimit)
    die("static shared memory of %zu bytes, over the 48 KiB a block may declare", at + bytes);
  // Without a raised limit, a block's static and dynamic shared memory share the 48 KiB.
  if (shared_limit(b.kernel) == kDefaultSharedLimit && at + bytes + b.shared_bytes > kDefaultSharedLimit)
    die("%zu bytes of static and %zu of dynamic shared memory, over 48 KiB without cudaFuncSetAttribute "
        "raising the kernel's limit", at + bytes, b.shared_bytes);
  b.static_used = at + bytes;
  return place_static(b, key, bytes, align);
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

// Whether [p, p + bytes) lies in the running block's dynamic shared memory or in one of its
// static variables.
bool in_shared(const char* p, size_t bytes) {
  for (const SharedVariable& v : running->variables)
    if (p >= v.start && p + bytes <= v.start + v.bytes) return true;
  return false;
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

// A device allocation: kCanaryBytes of canary, what was asked for (poisoned), canary up to
// the next 32 bytes, then the mapping's guard page.
struct Allocation {
  nfn_emu::Guarded mapping;
  size_t bytes;  // what was asked for
};

std::mutex allocations_mutex;
std::map<uintptr_t, Allocation> allocations;  // by data address

// Bytes from an allocation's start to its guard page: what was asked for, rounded up to 32.
size_t rounded(size_t bytes) { return nfn_emu::round_up(std::max<size_t>(bytes, 1), 32); }

// The first changed canary byte around the allocation at p, or null.
const char* changed_canary(const char* p, size_t bytes) {
  if (const char* at = nfn_emu::first_changed(p - nfn_emu::kCanaryBytes, p)) return at;
  return nfn_emu::first_changed(p + bytes, p + rounded(bytes));
}

[[noreturn]] void written_outside(const char* by, const char* p, size_t bytes, const char* at) {
  nfn_emu::die("%s wrote outside a device allocation: offset %td of the %zu-byte allocation at %p changed", by,
               at - p, bytes, static_cast<const void*>(p));
}

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

void nfn_emu::check_device_canaries(const char* by) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  for (const auto& [start, a] : allocations) {
    const char* p = reinterpret_cast<const char*>(start);
    if (const char* at = changed_canary(p, a.bytes)) written_outside(by, p, a.bytes, at);
  }
}

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
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
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
  // 32-byte aligned and ending as close to the guard page as that allows. cudaMalloc gives
  // 256; the widest access of ours is 32 bytes (Pack<float, 8>), so an offset misaligned for
  // it is misaligned here as it would be on a GPU, and a 16-byte alignment would fault on
  // one that a GPU runs (scratch carved at 256-byte offsets).
  if (bytes > SIZE_MAX / 2) return nfn_emu::last_error = cudaErrorMemoryAllocation;  // rounding would wrap
  nfn_emu::Guarded m;
  if (!nfn_emu::map_guarded(rounded(bytes) + nfn_emu::kCanaryBytes, &m))
    return nfn_emu::last_error = cudaErrorMemoryAllocation;
  char* p = m.guard - rounded(bytes);
  nfn_emu::fill_canary(p - nfn_emu::kCanaryBytes, p);
  std::memset(p, 0xff, bytes);
  nfn_emu::fill_canary(p + bytes, m.guard);
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{m, bytes};
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
  // What ran since the last check, which follows every kernel, GEMM and sort: host code.
  const char* p = static_cast<const char*>(ptr);
  if (const char* at = changed_canary(p, a.bytes)) written_outside("host code (found at cudaFree)", p, a.bytes, at);
  munmap(a.mapping.map, a.mapping.bytes);  // later use of the pointer faults (until the range is reused)
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

// An event: the record it marks (0: never recorded), the copies issued before it and, for
// a timing event, the host's clock at the record.
struct nfn_emu_event {
  unsigned flags = 0;
  uint64_t record = 0;
  uint64_t copies_before = 0;
  std::chrono::steady_clock::time_point at;
  // Recorded inside a capture: which capture, on which stream, after how much of its work.
  const void* capture = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t issued = 0;
};

namespace {

uint64_t records = 0;            // event records so far
uint64_t completed_records = 0;  // records a wait or synchronize has covered

}  // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new nfn_emu_event;
  (*event)->flags = flags;
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
  event->at = std::chrono::steady_clock::now();
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

// As CUDA answers: a handle error for an event without timing or never recorded, "not
// ready" until a wait has covered both records.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return nfn_emu::last_error = cudaErrorInvalidValue;
  if (refused_in_capture("cudaEventElapsedTime")) return cudaErrorStreamCaptureUnsupported;
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0 || start->record == 0 || end->record == 0)
    return nfn_emu::last_error = cudaErrorInvalidResourceHandle;
  if (std::max(start->record, end->record) > completed_records) return nfn_emu::last_error = cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  nfn_emu::trace("event elapsed");
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
