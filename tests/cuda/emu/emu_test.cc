// The CUDA emulator (cuda/emu) against what CUDA specifies: warp shuffles, barriers,
// ldmatrix (per the PTX ISA), cp.async groups, the mma.sync m16n8k16 product (through the attention kernels'
// fragment loads, whose addressing tests/cuda:mma_layout_test checks against the PTX ISA),
// launch limits, copy bounds, CUB's sort, the two block orders, capture across streams (fork
// and join); and that it stops with a
// message naming the kernel on a deadlock, an access past an allocation, a write just outside
// an allocation or a block's shared memory (and not for one just inside), a shuffle after lanes
// exited, an ldmatrix row address that is misaligned or not in shared memory, and cp.async
// copies never waited for or aimed outside shared memory. Independent references: closed-form
// expectations, a naive matrix product, std::stable_sort.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "cc/util/bf16.h"
#include "tests/cc/child.h"
#include "tests/cc/expect.h"
#include "tests/cuda/emu/probes.h"

namespace {

// Runs fn in a child process; its stderr, and the signal that ended it (0 if none).
std::string run_in_child(void (*fn)(), int* signal_number) {
  const nfn_test::ChildResult r = nfn_test::run_in_child(fn);
  *signal_number = r.signal;
  return r.err;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void check_shuffles() {
  std::vector<int> x, d;
  emu_probe::shuffles(&x, &d);
  for (int t = 0; t < 64; ++t) {
    EXPECT(x[t] == 10 * (t ^ 5), "xor shuffle, thread %d: %d", t, x[t]);
    const int lane = t % 32;
    EXPECT(d[t] == (lane + 3 < 32 ? t + 3 : t), "down shuffle, thread %d: %d", t, d[t]);
  }
}

void check_barriers() {
  const std::vector<int> with = emu_probe::shared_rotation(true);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 256; ++t)
      EXPECT(with[b * 256 + t] == 1000 * b + (t + 32) % 256, "block %d thread %d read %d", b, t, with[b * 256 + t]);
  // Without the barrier, each block (the first run front to back, the second back to front)
  // has threads that read before the writer ran.
  const std::vector<int> without = emu_probe::shared_rotation(false);
  for (int b = 0; b < 2; ++b) {
    int stale = 0;
    for (int t = 0; t < 256; ++t) stale += without[b * 256 + t] != 1000 * b + (t + 32) % 256;
    EXPECT(stale > 0, "block %d: a missing __syncthreads went unnoticed", b);
  }
  const int unwritten = emu_probe::unwritten_shared();
  EXPECT(unwritten == -1, "unwritten static shared memory reads %d, not the poison", unwritten);
}

void check_mma() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<uint16_t> a(16 * 16), b(16 * 16);
  std::vector<float> c(16 * 16);
  for (auto& v : a) v = nfn::f32_to_bf16(dist(rng));
  for (auto& v : b) v = nfn::f32_to_bf16(dist(rng));
  for (auto& v : c) v = dist(rng);
  const std::vector<float> d = emu_probe::mma(a, b, c);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = c[i * 16 + j];
      for (int k = 0; k < 16; ++k) want += double(nfn::bf16_to_f32(a[i * 16 + k])) * nfn::bf16_to_f32(b[k * 16 + j]);
      EXPECT(std::fabs(d[i * 16 + j] - want) < 1e-4, "mma D[%d][%d] = %g, want %g", i, j, d[i * 16 + j], want);
    }
}

// ldmatrix per the PTX ISA: register i of lane l holds, from matrix i (rows 8i..8i+7 here),
// the pair (row l / 4, columns 2 (l % 4), + 1), or with .trans (rows 2 (l % 4), + 1, column l / 4).
void check_ldmatrix() {
  for (bool trans : {false, true}) {
    const std::vector<uint32_t> got = emu_probe::ldmatrix(trans);
    int bad = 0;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int g = lane / 4, t = lane % 4;
        const uint32_t lo = trans ? 8 * (8 * i + 2 * t) + g : 8 * (8 * i + g) + 2 * t;
        const uint32_t hi = trans ? lo + 8 : lo + 1;
        bad += got[lane * 4 + i] != (lo | hi << 16);
      }
    EXPECT(bad == 0, "ldmatrix.x4%s: %d registers wrong", trans ? ".trans" : "", bad);
  }
}

// In forward order cp.async lands nothing until a wait covers its group: before, the shared
// words hold the emulator's poison; wait_group 1 lands the older group only. In reverse order
// every copy lands as it is issued. src-size 0 writes zeros.
void check_cp_async() {
  const uint32_t P = 0xffffffffu, src[4] = {11, 22, 33, 44};
  for (bool reverse : {false, true}) {
    const std::vector<uint32_t> got = emu_probe::cp_async(reverse);
    int bad = 0;
    for (int i = 0; i < 8; ++i) {
      const uint32_t landed = i < 4 ? src[i] : 0u;
      bad += got[i] != (reverse ? landed : P);
      bad += got[8 + i] != (reverse || i < 4 ? landed : P);
      bad += got[16 + i] != landed;
    }
    EXPECT(bad == 0, "cp.async, %s order: %d shared words wrong before or after the waits",
           reverse ? "reverse" : "forward", bad);
  }
}

void check_launch_limits() {
  bool cleared = false;
  constexpr int kInvalidConfiguration = 9, kInvalidValue = 1;
  EXPECT(emu_probe::launch_error(1024, 48 << 10, 0, &cleared) == 0 && cleared, "1024 threads, 48 KiB");
  EXPECT(emu_probe::launch_error(1025, 0, 0, &cleared) == kInvalidConfiguration && cleared, "1025 threads");
  EXPECT(emu_probe::launch_error(128, (48 << 10) + 16, 0, &cleared) == kInvalidConfiguration,
         "48 KiB + 16 without raising the limit");
  EXPECT(emu_probe::launch_error(128, 100000, 100000, &cleared) == 0, "100000 bytes after raising the limit");
  EXPECT(emu_probe::raise_shared_limit((227 << 10) + 1) == kInvalidValue, "a limit past sm_90's 227 KiB");
  EXPECT(emu_probe::launch_other_kernel_after_raising() == kInvalidConfiguration,
         "one kernel's raised limit let another kernel launch");
  EXPECT(emu_probe::malloc_alignment() >= 32, "cudaMalloc's pointers aligned to %d bytes, not 32",
         emu_probe::malloc_alignment());
  EXPECT(emu_probe::copy_from_64_bytes(64) == 0, "copying a whole allocation");
  EXPECT(emu_probe::copy_from_64_bytes(65) == kInvalidValue, "copying past an allocation");
  EXPECT(emu_probe::pinned_upload(true) == 0, "rewriting a page-locked upload's source after a synchronize");
  EXPECT(emu_probe::pinned_upload_event(true) == 0,
         "rewriting a page-locked upload's source after waiting for an event recorded after it");
  // The emulated GPU is always behind: a download lands, and its event is done, at the wait.
  constexpr int kNotReady = 600;
  int before = 0, after = 0, query_before = 0, query_after = 0;
  emu_probe::pinned_download(&before, &after, &query_before, &query_after);
  EXPECT(before == 0xff && after == 7, "a download into page-locked memory: %d before the event wait, %d after",
         before, after);
  EXPECT(query_before == kNotReady && query_after == 0, "cudaEventQuery: %d before the wait, %d after",
         query_before, query_after);
}

void check_sort() {
  std::mt19937 rng(9);
  std::vector<int32_t> keys(1000);
  for (auto& k : keys) k = static_cast<int32_t>(rng() % 50);
  std::vector<int32_t> sorted, values;
  emu_probe::sort_pairs(keys, &sorted, &values);
  std::vector<int32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return keys[x] < keys[y]; });
  bool same = values == order;
  for (size_t i = 0; i < keys.size(); ++i) same = same && sorted[i] == keys[order[i]];
  EXPECT(same, "SortPairs is not a stable sort by key");
}

void check_block_order() {
  for (bool reverse : {false, true}) {
    std::vector<int> position, first;
    emu_probe::block_order(reverse, &position, &first);
    for (int b = 0; b < 6; ++b) {
      const int want_position = reverse ? 5 - b : b;
      const int want_first = (b % 3 + b / 3) % 2 != reverse ? 63 : 0;
      EXPECT(position[b] == want_position && first[b] == want_first,
             "%s order, block %d: ran at %d (want %d), thread %d first (want %d)",
             reverse ? "reverse" : "forward", b, position[b], want_position, first[b], want_first);
    }
  }
}

// Each probe stops its child process with this signal and a message holding both texts.
struct Failure {
  const char* what;
  void (*probe)();
  int signal;
  const char* where;
  const char* why;
};

// Stream capture across streams, as CUDA specifies it: a stream that waits on an event
// recorded in the capture joins it; the capture ends only once the origin has waited on the
// joined stream's work (else cudaErrorStreamCaptureUnjoined, 904); a stream that never joined
// cannot issue work inside it (cudaErrorStreamCaptureUnsupported, 900).
// A kernel launched by launch_kernel (cuda/ops/launch.h) that calls pdl_begin first runs as
// any other; check_failures_are_reported has the two that do not.
void check_launch_kernel() {
  const int wrote = emu_probe::launch_kernel_pdl(0);
  EXPECT(wrote == 31, "launch_kernel with pdl_begin first: thread 31 wrote %d", wrote);
}

void check_capture_fork() {
  int outside = 0;
  const int joined = emu_probe::capture_fork(true, &outside);
  EXPECT(joined == 0 && outside == 900, "a fork then a join: end %d (want 0); a stream outside: %d (want 900)",
         joined, outside);
  const int unjoined = emu_probe::capture_fork(false, &outside);
  EXPECT(unjoined == 904, "a fork never joined: end %d (want 904)", unjoined);
}

// In-bounds work up to every edge raises nothing; reads outside an allocation see NaN.
void check_bounds() {
  int sig = 0;
  const std::string err = run_in_child(emu_probe::in_bounds, &sig);
  EXPECT(sig == 0 && err.empty(), "in-bounds launches: signal %d, '%s'", sig, err.c_str());
  const std::vector<uint32_t> got = emu_probe::read_outside();
  auto f32_nan = [](uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0; };
  const bool bf16_nan = (got[1] & 0x7f80u) == 0x7f80u && (got[1] & 0x7fu) != 0;
  EXPECT(f32_nan(got[0]) && bf16_nan && f32_nan(got[2]),
         "reads outside a 33-byte allocation: f32 at 36 %#x, bf16 at 34 %#x, f32 at -4 %#x (want NaNs)", got[0],
         got[1], got[2]);
}

void check_failures_are_reported() {
  const Failure failures[] = {
      {"deadlock", emu_probe::deadlock, SIGABRT, "deadlock_kernel",
       "deadlock: 16 threads wait at __syncthreads and 16 at a warp-wide operation"},
      {"out of bounds", emu_probe::out_of_bounds, SIGSEGV,
       "segmentation fault in kernel oob_kernel, block (0,0,0), thread (0,0,0)", ""},
      {"shuffle after exit", emu_probe::shuffle_after_exit, SIGABRT, "exit_then_shuffle_kernel",
       "a lane exited while 16 lanes of its warp wait at a warp shuffle or mma.sync with a full mask"},
      {"misaligned uint4 load", emu_probe::misaligned_vector_load, SIGILL,
       "illegal instruction in kernel misaligned_kernel, block (0,0,0)", "a misaligned vector access"},
      {"misaligned ldmatrix", emu_probe::ldmatrix_misaligned, SIGABRT,
       "ldmatrix_kernel, block (0,0,0), thread (5,0,0)", "is not 16-byte aligned"},
      {"ldmatrix from global memory", emu_probe::ldmatrix_global, SIGABRT, "thread (5,0,0)",
       "is not in this block's shared memory"},
      {"cp.async never waited for", emu_probe::cp_async_never_waited, SIGABRT, "cp_async_kernel",
       "the thread exited with 2 cp.async copies never waited for"},
      {"cp.async to global memory", emu_probe::cp_async_to_global, SIGABRT, "cp.async destination",
       "is not in this block's shared memory"},
      {"static shared over 48 KiB", emu_probe::too_much_static_shared, SIGABRT, "big_static_shared_kernel",
       "static shared memory of 49156 bytes, over the 48 KiB a block may declare"},
      {"launch_kernel without pdl_begin", emu_probe::pdl_begin_never, SIGABRT, "pdl_kernel",
       "the thread's exit before pdl_begin() in a kernel launched by launch_kernel"},
      {"launch_kernel with a barrier before pdl_begin", emu_probe::pdl_begin_after_barrier, SIGABRT, "pdl_kernel",
       "__syncthreads before pdl_begin() in a kernel launched by launch_kernel"},
      {"static and dynamic shared over 48 KiB", emu_probe::static_and_dynamic_over_48k, SIGABRT,
       "static_and_dynamic_kernel", "128 bytes of static and 49152 of dynamic shared memory, over 48 KiB"},
      {"page-locked upload rewritten", emu_probe::pinned_rewritten_before_sync, SIGABRT, "the host wrote page-locked memory",
       "had not yet read (64 bytes): wait for the stream before reusing the buffer"},
      {"page-locked upload rewritten after an earlier event", emu_probe::pinned_rewritten_after_an_earlier_event,
       SIGABRT, "the host wrote page-locked memory", "issued before the synchronize had not yet read (64 bytes)"},
      {"a write one byte past a 33-byte allocation", emu_probe::write_past_allocation, SIGABRT,
       "kernel store_byte_kernel wrote outside a device allocation", "offset 33 of the 33-byte allocation"},
      {"a write 4 bytes before an allocation", emu_probe::write_before_allocation, SIGABRT,
       "kernel store_float_kernel wrote outside a device allocation", "offset -4 of the 256-byte allocation"},
      {"a host write past an allocation", emu_probe::host_write_past_allocation, SIGABRT,
       "host code (found at cudaFree) wrote outside a device allocation", "offset 40 of the 33-byte allocation"},
      {"a write past 100 bytes of dynamic shared memory", emu_probe::write_past_dynamic_shared, SIGABRT,
       "kernel dynamic_store_kernel, block (1,0,0) wrote shared memory outside its variables",
       "offset 100 of the 100-byte dynamic shared memory changed"},
      {"a host write found at a launch", emu_probe::host_write_then_launch, SIGABRT,
       "host code (found at the launch of kernel store_byte_kernel) wrote outside a device allocation",
       "offset 40 of the 33-byte allocation"},
      {"a vector read of a float array", emu_probe::vector_read_of_a_float_array, SIGILL,
       "illegal instruction in kernel vector_read_static_kernel", "misaligned vector access"},
      {"a write past 256 bytes of dynamic shared memory", emu_probe::write_past_dynamic_shared_page, SIGSEGV,
       "segmentation fault in kernel dynamic_store_kernel, block (0,0,0), thread (0,0,0)",
       "out of bounds of its allocation or of its block's shared memory"},
      {"a write before dynamic shared memory", emu_probe::write_before_dynamic_shared, SIGABRT,
       "kernel dynamic_store_kernel, block (0,0,0) wrote shared memory outside its variables",
       "offset -4 of the 100-byte dynamic shared memory changed"},
      {"a write past a static shared array", emu_probe::write_past_static_shared, SIGABRT,
       "kernel static_store_kernel, block (0,0,0) wrote shared memory outside its variables",
       "offset 32 of a 32-byte static __shared__ variable"},
  };
  for (const Failure& f : failures) {
    int sig = 0;
    const std::string err = run_in_child(f.probe, &sig);
    EXPECT(sig == f.signal && contains(err, f.where) && contains(err, f.why), "%s: signal %d, '%s'", f.what, sig,
           err.c_str());
  }
}

}  // namespace

int main() {
  check_shuffles();
  check_barriers();
  check_mma();
  check_ldmatrix();
  check_cp_async();
  check_launch_limits();
  check_sort();
  check_block_order();
  check_capture_fork();
  check_launch_kernel();
  check_bounds();
  check_failures_are_reported();
  return nfn_test::finish("emu_test");
}
