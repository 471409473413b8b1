// cub::DeviceRadixSort::SortPairs for the CUDA emulator (cuda/emu): a stable sort by key
// with CUB's calling convention (a size query with null temporary storage, then the sort,
// issued on the stream like CUB's kernels, so a graph capture records it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda/emu/include/cuda_runtime.h"

namespace cub {

struct DeviceRadixSort {
  template <typename Key, typename Value>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const Key* keys_in, Key* keys_out,
                               const Value* values_in, Value* values_out, int n, int begin_bit = 0,
                               int end_bit = static_cast<int>(sizeof(Key) * 8), cudaStream_t stream = nullptr) {
    const size_t needed = 256;  // CUB needs some; asking for it proves the caller provides it
    if (temp == nullptr) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    if (temp_bytes < needed || n < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(Key) * 8) ||
        begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    // The sort runs on the stream: now, or when a graph that captured it runs.
    return nfn_emu::enqueue(stream, "cub::DeviceRadixSort::SortPairs", [=] {
      sort(keys_in, keys_out, values_in, values_out, n, begin_bit, end_bit);
      nfn_emu::check_device_canaries("cub::DeviceRadixSort::SortPairs");
    });
  }

 private:
  template <typename Key, typename Value>
  static void sort(const Key* keys_in, Key* keys_out, const Value* values_in, Value* values_out, int n,
                   int begin_bit, int end_bit) {
    using Bits = typename std::make_unsigned<Key>::type;
    const Bits sign = static_cast<Bits>(std::is_signed<Key>::value ? Bits(1) << (sizeof(Key) * 8 - 1) : 0);
    const int width = end_bit - begin_bit;
    const Bits mask = width >= static_cast<int>(sizeof(Key) * 8) ? static_cast<Bits>(~Bits(0))
                                                                 : static_cast<Bits>((Bits(1) << width) - 1);
    auto radix = [&](Key k) { return static_cast<Bits>((static_cast<Bits>(k) ^ sign) >> begin_bit) & mask; };
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return radix(keys_in[a]) < radix(keys_in[b]); });
    std::vector<Key> k(static_cast<size_t>(n));
    std::vector<Value> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) k[i] = keys_in[order[i]], v[i] = values_in[order[i]];
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
  }
};

}  // namespace cub
