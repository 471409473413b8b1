// Rotary position embedding on the CPU (f32): rope_forward, and rope_backward, the same
// rotation by the opposite angle. A thread takes whole rows; each row's cos and sin are
// computed once and serve all its q and k heads.
#include <string>
#include <vector>

#include "cc/ops/cpu/check.h"
#include "cc/ops/rope.h"

namespace {

// y = x rotated by the row's angles: y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, where sin
// already carries the sign. y may be x.
inline void rotate_head(float* y, const float* x, const float* cos, const float* sin, int half) {
  for (int j = 0; j < half; ++j) {
    const float x1 = x[j], x2 = x[j + half];
    y[j] = x1 * cos[j] - x2 * sin[j];
    y[j + half] = x2 * cos[j] + x1 * sin[j];
  }
}

// rope_forward (direction 1) and rope_backward (direction -1: the inverse rotation).
nfn_status rope(nfn_ctx* ctx, const char* op, const char* pointers, void* out, const void* inp, int N, int T,
                int pos_offset, int stride, int NH, int NKV, int HD, float theta, int sign, nfn_dtype dtype,
                int direction) {
  NFN_CHECK_CTX(ctx);
  NFN_RETURN_IF_ERROR(nfn::cpu::check_compute_dtype(ctx, op, dtype));
  const std::string why =
      nfn::rope::check_args(op, pointers, out, inp, N, T, pos_offset, stride, NH, NKV, HD, theta, sign);
  NFN_REQUIRE(why.empty(), "%s", why.c_str());
  const int half = HD / 2, heads = NH + NKV;
  std::vector<float> freq(half);
  for (int j = 0; j < half; ++j) freq[j] = nfn::rope::inv_freq(theta, j, HD);
  const float sin_sign = static_cast<float>(sign * direction);
  const float* x = static_cast<const float*>(inp);
  float* y = static_cast<float*>(out);
#pragma omp parallel if (static_cast<long>(N) * heads * HD > 4096)
  {
    std::vector<float> cosines(half), sines(half);
#pragma omp for schedule(static)
    for (int r = 0; r < N; ++r) {
      const float t = static_cast<float>(r % T + pos_offset);
      for (int j = 0; j < half; ++j) {
        nfn::rope::sincos(t * freq[j], &sines[j], &cosines[j]);
        sines[j] *= sin_sign;
      }
      const size_t row = static_cast<size_t>(r) * stride;
      for (int h = 0; h < heads; ++h)
        rotate_head(y + row + static_cast<size_t>(h) * HD, x + row + static_cast<size_t>(h) * HD, cosines.data(),
                    sines.data(), half);
    }
  }
  return NFN_OK;
}

}  // namespace

NFN_ROPE_ENTRY_POINTS(rope)
