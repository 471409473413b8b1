// The m16n8k16 fragment layouts and fragment loads of cuda/ops/mma_layout.h (the flash_mma
// attention kernels use exactly these functions) against the PTX ISA's fragment tables, with
// the warp's mma.sync emulated on the host: runs without a GPU. Values are multiples of 1/8
// in [-2, 2], exact in bf16, and every sum is exact in f32, so products compare exactly.
// Also: the loads are free of shared-memory bank conflicts with rows padded to HD + 8.
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
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const RowCol lo = ptx_a(lane, 2 * r), hi = ptx_a(lane, 2 * r + 1);
      EXPECT(a_row(lane, r) == lo.row && a_col(lane, r) == lo.col, "A lane %d reg %d low half", lane, r);
      EXPECT(hi.row == lo.row && hi.col == lo.col + 1, "A lane %d reg %d: high half is the next column", lane, r);
    }
    for (int r = 0; r < 2; ++r) {
      const RowCol lo = ptx_b(lane, 2 * r), hi = ptx_b(lane, 2 * r + 1);
      EXPECT(b_k(lane, r) == lo.row && b_n(lane) == lo.col, "B lane %d reg %d low half", lane, r);
      EXPECT(hi.row == lo.row + 1 && hi.col == lo.col, "B lane %d reg %d: high half is the next k", lane, r);
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = ptx_c(lane, i);
      EXPECT(c_row(lane, i) == rc.row && c_col(lane, i) == rc.col, "C lane %d element %d", lane, i);
    }
  }
}

// S = Q K^T for one warp's 16 query rows (rows 16 * warp.. of a 64-row Q tile) against a
// 64-key K tile, as the forward and dq kernels compute it (and dkdv's S^T = K Q^T).
void check_scores(int HD, int warp) {
  const int S = HD + 8;
  const Matrix q(64, HD, S), k(64, HD, S);
  float s[8][32][4] = {};
  for (int j = 0; j < 8; ++j)
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[32][4], b[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        load_a(a[lane], q.bits.data(), S, 16 * warp, 16 * kk, lane);
        load_b_transposed(b[lane], k.bits.data(), S, 8 * j, 16 * kk, lane);
      }
      warp_mma(s[j], a, b);
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
    for (int j = 0; j < HD / 8; ++j) {
      uint32_t b[32][2];
      for (int lane = 0; lane < 32; ++lane) load_b(b[lane], v.bits.data(), S, 16 * kk, 8 * j, lane);
      float d[32][4];
      std::memcpy(d, &o[j * 128], sizeof d);
      warp_mma(d, a, b);
      std::memcpy(&o[j * 128], d, sizeof d);
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

// Shared-memory bank conflicts of the fragment loads, from the addresses the load functions
// really use: the matrix holds each element's own offset, so a loaded register says which
// elements (hence which 32-bit words) the lane read. 32 banks of 4 bytes; a warp's access is
// conflict-free when no bank serves two different words. Returns the worst number of words
// one bank serves over every load instruction of the tile origins the kernels use.
int worst_bank_load(int HD, int stride) {
  const int rows = 64;
  std::vector<uint16_t> offsets(static_cast<size_t>(rows) * stride);
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<uint16_t>(i);
  int worst = 0;
  // One warp-wide access: per lane the element offset it reads (a 32-bit load reads the
  // pair starting there; a 16-bit load one element).
  auto account = [&](const int (&element)[32]) {
    int words_in_bank[32][32], count[32] = {};
    for (int lane = 0; lane < 32; ++lane) {
      const int word = element[lane] / 2, bank = word % 32;
      bool seen = false;
      for (int k = 0; k < count[bank]; ++k) seen = seen || words_in_bank[bank][k] == word;
      if (!seen) words_in_bank[bank][count[bank]++] = word;
    }
    for (int bank = 0; bank < 32; ++bank) worst = count[bank] > worst ? count[bank] : worst;
  };
  const uint16_t* m = offsets.data();
  // Origins on the 8-element grid: a superset of the kernels' (16-row, 16- or 8-column).
  for (int r0 = 0; r0 + 16 <= rows; r0 += 8)
    for (int c0 = 0; c0 + 16 <= HD; c0 += 8) {
      uint32_t a[32][4], bt[32][2], b[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        load_a(a[lane], m, stride, r0, c0, lane);             // Q, K, V tiles (pairs in a row)
        load_b_transposed(bt[lane], m, stride, r0, c0, lane);  // K, dO for S = Q K^T, dP = dO V^T
        load_b(b[lane], m, stride, r0, c0, lane);             // V, dO, Q, K for P V and its kin
      }
      for (int r = 0; r < 4; ++r) {
        int e[32];
        for (int lane = 0; lane < 32; ++lane) e[lane] = a[lane][r] & 0xffff;
        account(e);
      }
      for (int r = 0; r < 2; ++r) {
        int lo[32], hi[32], t[32];
        for (int lane = 0; lane < 32; ++lane) {
          t[lane] = bt[lane][r] & 0xffff;
          lo[lane] = b[lane][r] & 0xffff;  // load_b: two 16-bit loads, rows k and k + 1
          hi[lane] = b[lane][r] >> 16;
        }
        account(t);
        account(lo);
        account(hi);
      }
    }
  return worst;
}

void check_bank_conflicts() {
  for (int HD : {64, 128}) {
    const int padded = worst_bank_load(HD, HD + 8), unpadded = worst_bank_load(HD, HD);
    EXPECT(padded == 1, "head size %d, rows of HD + 8: a bank serves %d words in one load", HD, padded);
    // Without the padding, rows fall on the same banks: the padding is what avoids it.
    EXPECT(unpadded >= 4, "head size %d, rows of HD: only %d-way conflicts", HD, unpadded);
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
  check_pack();
  check_bank_conflicts();
  for (int HD : {64, 128}) {
    for (int warp : {0, 3}) check_scores(HD, warp);
    check_values(HD);
  }
  return nfn_test::finish("mma_layout_test");
}
