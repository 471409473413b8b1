// Kernels that probe the CUDA emulator (cuda/emu), compiled by it from probes.cu; each
// function launches one and returns what the host needs to check it.
#pragma once

#include <cstdint>
#include <vector>

namespace emu_probe {

// 64 threads: __shfl_xor_sync(10 t, 5) and __shfl_down_sync(t, 3) for each thread t.
void shuffles(std::vector<int>* xor_out, std::vector<int>* down_out);

// Two blocks of 256 threads: each writes its index to shared memory, then reads the value
// 32 places on. With the __syncthreads between (`barrier`) every read sees this block's
// write; without, the emulator's ordering makes reads see stale data.
std::vector<int> shared_rotation(bool barrier);

// One warp: D = A B + C through mma_bf16 with the attention kernels' fragment loads
// (ldmatrix from shared memory). a and b are 16x16 (bf16 bits, row-major; b as k x n), c and
// the result 16x16 f32, row-major.
std::vector<float> mma(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<float>& c);

// cp.async by one thread, in two groups (src's 4 words {11, 22, 33, 44} into shared words
// 0..3; zeros into 4..7), those 8 shared words read before any wait [0, 8), after
// cp.async.wait_group 1 [8, 16) and after wait_group 0 [16, 24); run in reverse order or not.
std::vector<uint32_t> cp_async(bool reverse);

// One warp's ldmatrix .x4 (.trans or not) from a 32 x 8 shared matrix of 16-bit values whose
// element (r, c) is 8 r + c, lane l giving the address of row l: register i of lane l at
// [4 l + i].
std::vector<uint32_t> ldmatrix(bool trans);

// A grid of 3 x 2 blocks of 64 threads, run with nfn_emu_reverse_order(reverse): the
// position at which each block ran (by linear block index), and the first of its threads
// to run. Forward: blocks in index order, even blocks from thread 0, odd ones from thread 63.
void block_order(bool reverse, std::vector<int>* position, std::vector<int>* first_thread);

// What a thread reads from a static __shared__ int it never wrote, in a launch after one
// that wrote it: the emulator's poison (-1), never 0 or the old value.
int unwritten_shared();

// cudaGetLastError after launching with `threads` per block and `shared` dynamic bytes, having
// raised the limit to `opt_in` bytes first (0: not raised); then whether the error was cleared.
int launch_error(int threads, int shared, int opt_in, bool* cleared);
int raise_shared_limit(int bytes);  // cudaFuncSetAttribute's result
// cudaGetLastError after raising one kernel's limit to 100000 bytes and launching another
// with that much: the limit is the kernel's own.
int launch_other_kernel_after_raising();

// A 32-thread kernel launched by cuda/ops/launch.h's launch_kernel that calls pdl_begin first
// (mode 0: returns what thread 31 wrote, 31), never (1), or after a __syncthreads (2): the
// emulator stops the last two.
int launch_kernel_pdl(int mode);
void pdl_begin_never();
void pdl_begin_after_barrier();

// cudaMemcpyAsync device-to-host of `bytes` from a 64-byte allocation.
int copy_from_64_bytes(int bytes);
// The smallest alignment, in bytes, of cudaMalloc's pointers over allocations of 1 to 300
// bytes (a GPU gives 256; the emulator must give at least the widest vector access, 32).
int malloc_alignment();

// An upload from page-locked memory, the source rewritten after a synchronize (allowed:
// returns the second synchronize's result).
int pinned_upload(bool rewrite_after_sync);

// A capture on one stream that forks a second (it waits on an event recorded in the capture)
// and sets 16 bytes there: cudaStreamEndCapture's result, with the origin waiting on an event
// recorded on the second stream after that (`join`) or not; and in *outside, the result of
// the same memset on a third stream, which never joined.
int capture_fork(bool join, int* outside);

// A download into page-locked memory, an event recorded after it: the last byte the host
// sees before and after cudaEventSynchronize, and cudaEventQuery's answer before and after.
void pinned_download(int* before, int* after, int* query_before, int* query_after);

// An upload from page-locked memory and an event recorded after it (allowed: returns the
// final synchronize's result) or before it (see pinned_rewritten_after_an_earlier_event);
// the event is waited for, then the source rewritten.
int pinned_upload_event(bool record_after_upload);

// Launches that stay in bounds, to the last byte of a 33-byte allocation, of a static
// __shared__ array and of dynamic shared memory of 100 bytes, over 48 KiB and none; it
// aborts if a result is wrong, and the emulator must report nothing.
void in_bounds();
// What a kernel reads outside a 33-byte allocation: the bits of an f32 at byte 36 and of a
// bf16 at byte 34 (the rounding to 32 bytes), and of an f32 at byte -4.
std::vector<uint32_t> read_outside();

// These end the process (run them in a child): lanes 0..15 of a warp wait at __syncthreads
// while 16..31 wait at a shuffle; a kernel ("oob_kernel") writes 64 bytes past a 256-byte
// allocation; half a warp exits and the rest shuffle; a kernel declares 48 KiB + 4 bytes of
// static shared memory.
void deadlock();
void out_of_bounds();
void shuffle_after_exit();
void too_much_static_shared();
void static_and_dynamic_over_48k();  // 128 bytes static and 48 KiB dynamic, limit not raised
void misaligned_vector_load();  // a uint4 read 4 bytes past a 16-byte boundary
void ldmatrix_misaligned();     // lane 5's ldmatrix row address 8 bytes past a 16-byte boundary
void ldmatrix_global();         // lane 5's ldmatrix row address in global memory
void cp_async_never_waited();   // a thread exits with two cp.async groups in flight
void cp_async_to_global();      // a cp.async whose destination is global memory
void pinned_rewritten_before_sync();  // a page-locked upload's source rewritten before a synchronize
void pinned_rewritten_after_an_earlier_event();  // ... after waiting for an event recorded before it
void write_past_allocation();       // "store_byte_kernel" writes byte 33 of a 33-byte allocation
void write_before_allocation();     // "store_float_kernel" writes the f32 before a 256-byte allocation
void host_write_past_allocation();  // the host writes byte 40 of a 33-byte allocation, then frees it
void host_write_then_launch();  // ... then launches "store_byte_kernel", which writes within it
void vector_read_of_a_float_array();  // "vector_read_static_kernel": a float4 read of a static float[36]
// "dynamic_store_kernel" writes the f32 right past its block's dynamic shared memory: block 1
// of 2 with 100 bytes, or with 256 bytes (the guard page), or the f32 before 100 bytes.
void write_past_dynamic_shared();
void write_past_dynamic_shared_page();
void write_before_dynamic_shared();
void write_past_static_shared();  // "static_store_kernel" writes the f32 past a static float[8]

// cub::DeviceRadixSort::SortPairs of (keys, 0..n-1).
void sort_pairs(const std::vector<int32_t>& keys, std::vector<int32_t>* sorted_keys, std::vector<int32_t>* values);

}  // namespace emu_probe
