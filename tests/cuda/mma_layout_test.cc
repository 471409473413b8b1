// The m16n8k16 fragment layouts and the ldmatrix addressing of cuda/ops/mma_layout.h (the
// flash_mma attention kernels load every fragment through ldmatrix at exactly these offsets,
// attention_mma.cuh) against the PTX ISA's fragment and ldmatrix tables, with the warp's
// ldmatrix and mma.sync emulated on the host: runs without a GPU. Values are multiples of 1/8
// in [-2, 2], exact in bf16, and every sum is exact in f32, so products compare exactly.
// Also: every ldmatrix is free of shared-memory bank conflicts with rows padded to HD + 8.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/ops/mma_layout.h"
#include "tests/cc/expect.h"

using namespace nfn::cuda::mma;

namespace {

struct RowCol {
  int row, col;
};

// The PTX ISA tables as the manual states them ("Matrix Fragments for mma.m16n8k16 with
// floating point type"), for element i of the lane's fragment (a0..a7, b0..b3, c0..c3),
// written out independently of mma_layout.h.
RowCol ptx_a(int lane, int i) {
  const int groupID = lane >> 2, threadID_in_group = lane % 4;
  const int row = (i < 2 || (4 <= i && i < 6)) ? groupID : groupID + 8;
  const int col = i < 4 ? threadID_in_group * 2 + (i & 1) : threadID_in_group * 2 + (i & 1) + 8;
  return {row, col};
}
RowCol ptx_b(int lane, int i) {  // row is k, col is n
  const int groupID = lane >> 2, threadID_in_group = lane % 4;
  const int row = i < 2 ? threadID_in_group * 2 + (i & 1) : threadID_in_group * 2 + (i & 1) + 8;
  return {row, groupID};
}
RowCol ptx_c(int lane, int i) {
  const int groupID = lane >> 2, threadID_in_group = lane % 4;
  return {i < 2 ? groupID : groupID + 8, threadID_in_group * 2 + (i & 1)};
}

float bf16_value(uint32_t bits) {
  const uint32_t f32 = (bits & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &f32, 4);
  return f;
}

// Element i of a fragment whose registers hold two bf16 each, lower index in the low half.
float element(const uint32_t* regs, int i) { return bf16_value(regs[i / 2] >> (16 * (i % 2))); }

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 as the PTX ISA describes it: threads
// 8i..8i+7 give the addresses of rows 0..7 of matrix i; each thread receives one register per
// matrix, "a fragment" of it: the elements (row lane / 4, columns 2 (lane % 4) and + 1), or for
// .trans the matrix read column-major: (rows 2 (lane % 4) and + 1, column lane / 4).
void ldmatrix_x4(uint32_t (&regs)[32][4], const uint16_t* m, const int (&offset)[32], bool trans) {
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int g = lane / 4, t = lane % 4;
      const uint16_t* row0 = m + offset[8 * i + (trans ? 2 * t : g)];
      const uint16_t* row1 = m + offset[8 * i + (trans ? 2 * t + 1 : g)];
      const uint16_t lo = trans ? row0[g] : row0[2 * t], hi = trans ? row1[g] : row0[2 * t + 1];
      regs[lane][i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
    }
}

// The kernels' three fragment loads (attention_mma.cuh), warp-wide: the offsets mma_layout.h
// gives each lane (offset_of(lane, stride, r0, c0)), through ldmatrix, registers split as the
// kernels split them.
using OffsetOf = int (*)(int lane, int stride, int r0, int c0);
void ldmatrix_at(uint32_t (&regs)[32][4], const uint16_t* m, OffsetOf offset_of, int stride, int r0, int c0,
                 bool trans) {
  int offset[32];
  for (int lane = 0; lane < 32; ++lane) offset[lane] = offset_of(lane, stride, r0, c0);
  ldmatrix_x4(regs, m, offset, trans);
}
void load_a(uint32_t (&a)[32][4], const uint16_t* m, int stride, int row0, int col0) {
  ldmatrix_at(a, m, a_ldsm_offset, stride, row0, col0, false);
}
// B fragments for the n-tiles n0 (b[0]) and n0 + 8 (b[1]): registers {0, 1} and {2, 3}.
void load_b_pair(uint32_t (&b)[2][32][2], const uint16_t* m, OffsetOf offset_of, int stride, int r0, int c0,
                 bool trans) {
  uint32_t r[32][4];
  ldmatrix_at(r, m, offset_of, stride, r0, c0, trans);
  for (int lane = 0; lane < 32; ++lane)
    for (int n = 0; n < 2; ++n) b[n][lane][0] = r[lane][2 * n], b[n][lane][1] = r[lane][2 * n + 1];
}
void load_b_transposed(uint32_t (&b)[2][32][2], const uint16_t* m, int stride, int n0, int k0) {
  load_b_pair(b, m, bt_ldsm_offset, stride, n0, k0, false);
}
void load_b(uint32_t (&b)[2][32][2], const uint16_t* m, int stride, int k0, int n0) {
  load_b_pair(b, m, b_ldsm_offset, stride, k0, n0, true);
}

// One warp's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += a b, per the tables.
void warp_mma(float (&d)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
  float A[16][16], B[16][8];
  int seen_a[16][16] = {}, seen_b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const RowCol rc = ptx_a(lane, i);
      A[rc.row][rc.col] = element(a[lane], i);
      ++seen_a[rc.row][rc.col];
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = ptx_b(lane, i);
      B[rc.row][rc.col] = element(b[lane], i);
      ++seen_b[rc.row][rc.col];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) EXPECT(seen_a[r][c] == 1, "A(%d,%d) held %d times", r, c, seen_a[r][c]);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) EXPECT(seen_b[r][c] == 1, "B(%d,%d) held %d times", r, c, seen_b[r][c]);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = ptx_c(lane, i);
      for (int k = 0; k < 16; ++k) d[lane][i] += A[rc.row][k] * B[k][rc.col];
    }
}

std::mt19937 rng(7);

// A rows x cols matrix of bf16 bits, row-major with `stride` elements per row (as in shared
// memory), and the same values as floats.
struct Matrix {
  int rows, cols, stride;
  std::vector<uint16_t> bits;
  std::vector<float> value;
  Matrix(int r, int c, int s) : rows(r), cols(c), stride(s), bits(r * s, 0x7fc0u), value(r * c) {
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < c; ++j) {
        const float v = static_cast<float>(static_cast<int>(rng() % 33) - 16) / 8.f;
        value[i * c + j] = v;
        bits[i * s + j] = nfn::f32_to_bf16(v);
      }
  }
  float at(int i, int j) const { return value[i * cols + j]; }
};

void check_layout_functions() {
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = ptx_c(lane, i);
      EXPECT(c_row(lane, i) == rc.row && c_col(lane, i) == rc.col, "C lane %d element %d", lane, i);
    }
}

// The loads deliver exactly the elements the fragment tables name: in a matrix whose every
// element is its own offset, each half-register says which element it came from.
void check_fragments() {
  const int stride = 72, rows = 48;
  std::vector<uint16_t> offsets(rows * stride);
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<uint16_t>(i);
  const uint16_t* m = offsets.data();
  const int r0 = 16, c0 = 24;  // any origin on the 8-element grid
  int bad = 0;
  uint32_t a[32][4], bt[2][32][2], b[2][32][2];
  load_a(a, m, stride, r0, c0);
  load_b_transposed(bt, m, stride, r0, c0);
  load_b(b, m, stride, r0, c0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {  // A(row, col) = M[r0 + row][c0 + col]
      const RowCol rc = ptx_a(lane, i);
      bad += static_cast<int>(a[lane][i / 2] >> (16 * (i % 2)) & 0xffff) != (r0 + rc.row) * stride + c0 + rc.col;
    }
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 4; ++i) {  // B(k, col) of n-tile n
        const RowCol kc = ptx_b(lane, i);
        const int col = 8 * n + kc.col;
        const int got_t = bt[n][lane][i / 2] >> (16 * (i % 2)) & 0xffff;  // M[r0 + col][c0 + k]
        const int got = b[n][lane][i / 2] >> (16 * (i % 2)) & 0xffff;     // M[r0 + k][c0 + col]
        bad += got_t != (r0 + col) * stride + c0 + kc.row;
        bad += got != (r0 + kc.row) * stride + c0 + col;
      }
  }
  EXPECT(bad == 0, "ldmatrix fragments: %d elements not where the PTX tables put them", bad);
}

// S = Q K^T for one warp's 16 query rows (rows 16 * warp.. of a 64-row Q tile) against a
// 64-key K tile, as the forward and dq kernels compute it (and dkdv's S^T = K Q^T).
void check_scores(int HD, int warp) {
  const int S = HD + 8;
  const Matrix q(64, HD, S), k(64, HD, S);
  float s[8][32][4] = {};
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t a[32][4], b[2][32][2];
    load_a(a, q.bits.data(), S, 16 * warp, 16 * kk);
    for (int j = 0; j < 8; j += 2) {
      load_b_transposed(b, k.bits.data(), S, 8 * j, 16 * kk);
      warp_mma(s[j], a, b[0]);
      warp_mma(s[j + 1], a, b[1]);
    }
  }
  int bad = 0;
  for (int j = 0; j < 8; ++j)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * warp + c_row(lane, i), key = 8 * j + c_col(lane, i);
        float want = 0.f;
        for (int d = 0; d < HD; ++d) want += q.at(row, d) * k.at(key, d);
        bad += s[j][lane][i] != want;
      }
  EXPECT(bad == 0, "S = Q K^T, head size %d, warp %d: %d wrong elements", HD, warp, bad);
}

// O = P V with P (16 x 64) arriving as score accumulators and V a 64-key tile, as in the
// forward (and dQ = dS K, dV = P^T dO, dK = dS^T Q).
void check_values(int HD) {
  const int S = HD + 8;
  const Matrix v(64, HD, S);
  const Matrix p(16, 64, 64);  // only its values are used
  float acc[8][32][4];         // P in accumulator layout: tile j holds keys 8j..8j+7
  for (int j = 0; j < 8; ++j)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) acc[j][lane][i] = p.at(c_row(lane, i), 8 * j + c_col(lane, i));
  std::vector<float> o(HD / 8 * 32 * 4, 0.f);
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[32][4];
    for (int lane = 0; lane < 32; ++lane) accumulators_to_a(a[lane], acc[2 * kk][lane], acc[2 * kk + 1][lane]);
    for (int j = 0; j < HD / 8; j += 2) {
      uint32_t b[2][32][2];
      load_b(b, v.bits.data(), S, 16 * kk, 8 * j);
      for (int n = 0; n < 2; ++n) {
        float d[32][4];
        std::memcpy(d, &o[(j + n) * 128], sizeof d);
        warp_mma(d, a, b[n]);
        std::memcpy(&o[(j + n) * 128], d, sizeof d);
      }
    }
  }
  int bad = 0;
  for (int j = 0; j < HD / 8; ++j)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int row = c_row(lane, i), col = 8 * j + c_col(lane, i);
        float want = 0.f;
        for (int key = 0; key < 64; ++key) want += p.at(row, key) * v.at(key, col);
        bad += o[j * 128 + lane * 4 + i] != want;
      }
  EXPECT(bad == 0, "O = P V, head size %d: %d wrong elements", HD, bad);
}

// Shared-memory bank conflicts of the ldmatrix loads, from the offsets the kernels use. An
// ldmatrix reads each of its 8x8 matrices in one pass: 8 rows of 16 bytes, the 8 addresses of
// lanes 8i..8i+7. 32 banks of 4 bytes; the pass is conflict-free when its 32 words fall in 32
// different banks. Returns the worst number of words one bank serves in a pass, over the tile
// origins the kernels use (a superset: every origin on the 8-element grid).
int worst_bank_load(int HD, int stride) {
  const int rows = 64;
  int worst = 0;
  auto account = [&](OffsetOf offset, int r0, int c0) {
    for (int i = 0; i < 4; ++i) {
      int count[32] = {};
      for (int lane = 8 * i; lane < 8 * i + 8; ++lane)
        for (int w = 0; w < 4; ++w) ++count[(offset(lane, stride, r0, c0) / 2 + w) % 32];
      for (int bank = 0; bank < 32; ++bank) worst = count[bank] > worst ? count[bank] : worst;
    }
  };
  for (int r0 = 0; r0 + 16 <= rows; r0 += 8)
    for (int c0 = 0; c0 + 16 <= HD; c0 += 8) {
      account(a_ldsm_offset, r0, c0);   // Q, K, V, dO as A
      account(bt_ldsm_offset, r0, c0);  // K, dO, Q, V as B = M^T
      account(b_ldsm_offset, r0, c0);   // V, dO, Q, K as B = M
    }
  return worst;
}

// The head sizes flash_mma is built for (attention_common.cuh's NFN_MMA_HEAD_DISPATCH).
constexpr int kHeadSizes[] = {16, 32, 48, 64, 80, 96, 112, 128};

void check_bank_conflicts() {
  for (int HD : kHeadSizes) {
    const int padded = worst_bank_load(HD, HD + 8), unpadded = worst_bank_load(HD, HD);
    EXPECT(padded == 1, "head size %d, rows of HD + 8: a bank serves %d words in one load", HD, padded);
    // Without the padding, rows fall on the same banks (2-way at 16, 48, 80 and 112, whose
    // rows are 8 words times an odd number; more where HD is a multiple of 32): the padding
    // is what avoids it.
    EXPECT(unpadded >= 2, "head size %d, rows of HD: only %d-way conflicts", HD, unpadded);
  }
}

void check_pack() {
  EXPECT(pack_bf16x2(1.f, -2.f) == (0x3f80u | 0xc000u << 16), "pack_bf16x2(1, -2) = %08x",
         pack_bf16x2(1.f, -2.f));
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: nearest-even rounds down.
  EXPECT(nfn::f32_to_bf16(1.00390625f) == 0x3f80u, "round to nearest even");
}

}  // namespace

int main() {
  check_layout_functions();
  check_fragments();
  check_pack();
  check_bank_conflicts();
  for (int HD : kHeadSizes) {
    for (int warp : {0, 3}) check_scores(HD, warp);
    check_values(HD);
  }
  return nfn_test::finish("mma_layout_test");
}
