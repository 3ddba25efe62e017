// Device routines of w = A (beta e^g k) and u = A (beta v) shared by recompute_w_u_fwd (gdn_recompute.cu) and the
// forward's fused intra-chunk kernel (gdn_intra_fwd.cu): both scale the inverse's columns and form the products
// through these, so the fused kernel gives the same bytes as chunk_gated_delta_rule_fwd_kkt_solve followed by
// recompute_w_u_fwd.
#pragma once

#include "cuda/gdn_forward.cuh"

namespace fuseops::detail::cuda::gdn {

/// Which tensors move as 16-byte rows (cp.async / vector stores).
struct WuVec {
  bool k, v, A, w, u;
};

/// Row stride of the BT x BT A tile (16-bit): 8 rows of an ldmatrix hit distinct banks.
template <int BT>
constexpr int kLdA = BT + 8;

/// The two A operands of w and u from the inverse: Aw[i][j] = a_ij sw_j and Au[i][j] = a_ij sb_j for j <= i, 0 above
/// the diagonal (rows < BT), each rounded once to TK, where a_ij is the inverse (I + A)^{-1} as rounded to TK (as
/// chunk_gated_delta_rule_fwd_kkt_solve stores it), sw_j = beta_j e^{g_j} and sb_j = beta_j (fp32; BT finite entries,
/// 1 past the chunk): w = Aw k and u = Au v then multiply the raw k and v tiles. The columns of the BT x BT inverse are
/// scaled instead of the BT x K and BT x V operands (FLA rounds beta e^g k and beta v: w = a (beta e^g k)); one
/// rounding per term either way. `inverse(i, j0, f)` gives a_{i, j0 .. j0 + 7} as floats. Groups of 8 columns per
/// thread; a group is read whole before it is written, so Aw may be the tile `inverse` reads.
template <typename TK, int BT, typename Inverse>
__device__ void scale_inverse_columns(Inverse&& inverse, TK* Aw, TK* Au, const float* sw, const float* sb) {
  constexpr int kGroups = BT / 8;
  for (int u = static_cast<int>(threadIdx.x); u < BT * kGroups; u += kThreads) {
    const int i = u / kGroups, j0 = (u - i * kGroups) * 8;
    float f[8];
    inverse(i, j0, f);
    union {
      uint4 raw;
      TK e[8];
    } w, v;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const bool lower = j0 + e <= i;  // a select: no product of what lies above the diagonal
      w.e[e] = from_float<TK>(lower ? f[e] * sw[j0 + e] : 0.f);
      v.e[e] = from_float<TK>(lower ? f[e] * sb[j0 + e] : 0.f);
    }
    *reinterpret_cast<uint4*>(Aw + i * kLdA<BT> + j0) = w.raw;
    *reinterpret_cast<uint4*>(Au + i * kLdA<BT> + j0) = v.raw;
  }
}

/// O[i][c] = sum_{j <= i} A[i][j] X[j][c] for rows i < len and columns c < cols, fp32 accumulators handed to
/// `store(row, col, o0, o1)` (elements (row, col) and (row, col + 1); it rounds them once to the output dtype; rows may
/// reach the row block's end past len, columns the 32-column item's end past cols). Work items of 16 rows x 32
/// columns are dealt to the warps, the row blocks in reverse order on odd rounds so that the triangle's work is spread
/// evenly; each sums over the blocks j0 <= i0 only (A is zero above the diagonal), ascending.
template <typename TK, int BT, typename Store>
__device__ void lower_times(const TK* As, const TK* X, int ld, int len, int cols, Store&& store) {
  constexpr int MB = BT / 16;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int qr = lane / 4, qc = 2 * (lane % 4);
  const int items = MB * ((cols + 31) / 32);
  for (int item = warp; item < items; item += kWarps) {
    const int r = item % MB;
    const int mi = (item / kWarps) % 2 ? MB - 1 - r : r, n0 = (item / MB) * 32;
    if (mi * 16 >= len) continue;  // warp-uniform
    float acc[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    const TK* const a_ptr = As + (mi * 16 + (lane & 15)) * kLdA<BT> + (lane >> 4) * 8;
    const TK* const b_ptr = X + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
    for (int kk = 0; kk <= mi * 16; kk += 16) {
      uint32_t af[4];
      ldmatrix_x4(af, a_ptr + kk);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_ptr + kk * ld + p * 16);
        mma_m16n8k16<TK>(acc[2 * p], af, b[0], b[1]);
        mma_m16n8k16<TK>(acc[2 * p + 1], af, b[2], b[3]);
      }
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      store(mi * 16 + qr, n0 + t * 8 + qc, acc[t][0], acc[t][1]);
      store(mi * 16 + qr + 8, n0 + t * 8 + qc, acc[t][2], acc[t][3]);
    }
  }
}

/// lower_times into a shared staging tile O [BT][ld] (every row and column of the items).
template <typename TK, int BT>
__device__ void lower_times(const TK* As, const TK* X, int ld, TK* O, int len, int cols) {
  lower_times<TK, BT>(As, X, ld, len, cols, [&](int i, int c, float o0, float o1) {
    *reinterpret_cast<uint32_t*>(O + i * ld + c) = pack2<TK>(o0, o1);
  });
}

/// lower_times straight into global rows (row stride `stride`): rows < len, columns < cols. `pairs`: cols, stride and
/// dst allow 4-byte stores of two elements.
template <typename TK, int BT>
__device__ void lower_times_to_rows(const TK* As, const TK* X, int ld, TK* dst, int64_t stride, int len, int cols,
                                    bool pairs) {
  lower_times<TK, BT>(As, X, ld, len, cols, [&](int i, int c, float o0, float o1) {
    if (i >= len || c >= cols) return;
    TK* const p = dst + i * stride + c;
    if (pairs) {
      *reinterpret_cast<uint32_t*>(p) = pack2<TK>(o0, o1);
    } else {
      p[0] = from_float<TK>(o0);
      if (c + 1 < cols) p[1] = from_float<TK>(o1);
    }
  });
}

}  // namespace fuseops::detail::cuda::gdn
