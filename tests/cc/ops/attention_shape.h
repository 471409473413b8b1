// An attention call's geometry as nfn_ops.def gives it, with the sizes of its tensors and a
// name for check messages: the CPU attention test and the CUDA parity suite share it.
#pragma once

#include <cstddef>
#include <string>

namespace nfn_test {

struct AttentionShape {
  int B, T, NH, NKV, HD, W;  // W: the sliding window, 0 for none
  size_t row() const { return static_cast<size_t>(NH + 2 * NKV) * HD; }  // a qkv row
  size_t qkv() const { return B * T * row(); }
  size_t out() const { return static_cast<size_t>(B) * T * NH * HD; }
  size_t lse() const { return static_cast<size_t>(B) * NH * T; }
  // " B2 T77 hd64", then " NH4 NKV2" with grouped heads and " window3" with a window.
  std::string name() const {
    return " B" + std::to_string(B) + " T" + std::to_string(T) + " hd" + std::to_string(HD) +
           (NKV == NH ? "" : " NH" + std::to_string(NH) + " NKV" + std::to_string(NKV)) +
           (W == 0 ? "" : " window" + std::to_string(W));
  }
};

}  // namespace nfn_test
