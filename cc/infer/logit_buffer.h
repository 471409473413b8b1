// The logits of a forward's last rows on the backend: an allocation of their own, grown on
// demand (so growing it keeps the forward's activations), read back without the vocabulary's
// padding columns.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

class LogitBuffer {
 public:
  LogitBuffer() = default;
  ~LogitBuffer() { release(); }
  LogitBuffer(const LogitBuffer&) = delete;
  LogitBuffer& operator=(const LogitBuffer&) = delete;

  void bind(const nfn_op_table* ops, nfn_ctx* ctx) {
    release();
    ops_ = ops;
    ctx_ = ctx;
  }
  // Room for rows x Vp floats.
  bool reserve(int rows, size_t Vp, std::string* error);
  float* data() const { return data_; }
  // The first V of each row's Vp columns, rows x V floats, once the backend has finished.
  bool download(int rows, int V, int Vp, std::vector<float>* out, std::string* error) const;
  void release();

 private:
  const nfn_op_table* ops_ = nullptr;
  nfn_ctx* ctx_ = nullptr;
  float* data_ = nullptr;
  size_t capacity_ = 0;  // floats
};

}  // namespace nfn
