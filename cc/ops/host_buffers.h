// Page-locked host buffers from an op library (alloc_host), freed with the owner: staging
// for copies that are only queued, so a buffer must not be rewritten (uploads) or read
// (downloads) before a synchronize or event wait that covers the copy.
#pragma once

#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class HostBuffers {
 public:
  HostBuffers(const nfn_op_table& ops, nfn_ctx* ctx) : ops_(ops), ctx_(ctx) {}
  ~HostBuffers() {
    for (void* b : buffers_) ops_.free_host(ctx_, b);
  }
  HostBuffers(const HostBuffers&) = delete;
  HostBuffers& operator=(const HostBuffers&) = delete;

  // `count` more buffers of `bytes` each; false with "<what>: <reason>" in *error.
  bool alloc(int count, size_t bytes, const char* what, std::string* error) {
    for (int i = 0; i < count; ++i) {
      void* b = nullptr;
      if (ops_.alloc_host(ctx_, bytes, &b) != NFN_OK) {
        *error = std::string(what) + ": " + ops_.ctx_last_error(ctx_);
        return false;
      }
      buffers_.push_back(b);
    }
    return true;
  }
  void* operator[](size_t i) const { return buffers_[i]; }

 private:
  const nfn_op_table& ops_;
  nfn_ctx* ctx_;
  std::vector<void*> buffers_;
};

}  // namespace nfn
