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
  constexpr int kGroups = BT / 8, kUnits = BT * kGroups;
#pragma unroll
  for (int u0 = 0; u0 < kUnits; u0 += kThreads) {  // BT 64: two groups per thread
    const int u = u0 + static_cast<int>(threadIdx.x);
    if (kUnits % kThreads != 0 && u >= kUnits) break;
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

/// One 16 x 32 item of lower_times: acc[t] := rows [16 MI, 16 MI + 16) x columns [n0 + 8 t, n0 + 8 t + 8) of A X,
/// summed over the k blocks 0 .. MI in ascending order (A is zero above the diagonal). a_ptr / b_ptr: this lane's
/// ldmatrix rows of A's row block MI and of X's columns n0 at k = 0. MI is a template parameter so that the k loop is
/// unrolled (over a run-time bound its control took more instructions than its mma: docs/ops/gdn-log.md, fused intra-chunk
/// kernel).
template <typename TK, int BT, int MI>
__device__ __forceinline__ void lower_item(const TK* a_ptr, const TK* b_ptr, int ld, float (&acc)[4][4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
#pragma unroll
  for (int s = 0; s <= MI; ++s) {
    uint32_t af[4];
    ldmatrix_x4(af, a_ptr + 16 * s);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_ptr + 16 * s * ld + p * 16);
      mma_m16n8k16<TK>(acc[2 * p], af, b[0], b[1]);
      mma_m16n8k16<TK>(acc[2 * p + 1], af, b[2], b[3]);
    }
  }
}

/// O[i][c] = sum_{j <= i} A[i][j] X[j][c] for rows i < len and columns c < cols, fp32 accumulators handed to
/// `store(mi, n0, acc)` per item of 16 rows x 32 columns (row block mi, first column n0; acc as lower_item leaves it:
/// lane (qr, qc) = (lane / 4, 2 (lane % 4)) holds rows 16 mi + qr (acc[t][0..1]) and + 8 (acc[t][2..3]) at columns
/// n0 + 8 t + qc, + 1; the store rounds them once to the output dtype; the item may reach past len and cols). Items
/// are dealt to the warps, the row blocks in reverse order on odd rounds so that the triangle's work is spread
/// evenly; each sums over the blocks j0 <= i0 only (A is zero above the diagonal), ascending.
template <typename TK, int BT, typename Store>
__device__ void lower_times(const TK* As, const TK* X, int ld, int len, int cols, Store&& store) {
  constexpr int MB = BT / 16;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int items = MB * ((cols + 31) / 32);
  const TK* const a_lane = As + (lane & 15) * kLdA<BT> + (lane >> 4) * 8;
  const TK* const b_lane = X + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
  for (int item = warp; item < items; item += kWarps) {
    const int r = item % MB;
    const int mi = (item / kWarps) % 2 ? MB - 1 - r : r, n0 = (item / MB) * 32;
    if (mi * 16 >= len) continue;  // warp-uniform
    const TK* const a_ptr = a_lane + mi * 16 * kLdA<BT>;
    const TK* const b_ptr = b_lane + n0;
    float acc[4][4];
    switch (mi) {  // warp-uniform
      case 0: lower_item<TK, BT, 0>(a_ptr, b_ptr, ld, acc); break;
      case 1: if constexpr (MB > 1) lower_item<TK, BT, 1>(a_ptr, b_ptr, ld, acc); break;
      case 2: if constexpr (MB > 2) lower_item<TK, BT, 2>(a_ptr, b_ptr, ld, acc); break;
      default: if constexpr (MB > 3) lower_item<TK, BT, 3>(a_ptr, b_ptr, ld, acc); break;
    }
    store(mi, n0, acc);
  }
}

/// lower_times into a shared staging tile O [BT][ld] (every row and column of the items).
template <typename TK, int BT>
__device__ void lower_times(const TK* As, const TK* X, int ld, TK* O, int len, int cols) {
  const int lane = static_cast<int>(threadIdx.x % 32), qr = lane / 4, qc = 2 * (lane % 4);
  lower_times<TK, BT>(As, X, ld, len, cols, [&](int mi, int n0, const float(&acc)[4][4]) {
    TK* const o = O + (mi * 16 + qr) * ld + n0 + qc;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      *reinterpret_cast<uint32_t*>(o + 8 * t) = pack2<TK>(acc[t][0], acc[t][1]);
      *reinterpret_cast<uint32_t*>(o + 8 * ld + 8 * t) = pack2<TK>(acc[t][2], acc[t][3]);
    }
  });
}

/// lower_times straight into global rows (row stride `stride`): rows < len, columns < cols. `pairs`: cols, stride and
/// dst allow 4-byte stores of two elements. Items wholly inside (rows and columns) with pairs take one 64-bit row
/// offset per item and no per-element checks.
template <typename TK, int BT>
__device__ void lower_times_to_rows(const TK* As, const TK* X, int ld, TK* dst, int64_t stride, int len, int cols,
                                    bool pairs) {
  const int lane = static_cast<int>(threadIdx.x % 32), qr = lane / 4, qc = 2 * (lane % 4);
  lower_times<TK, BT>(As, X, ld, len, cols, [&](int mi, int n0, const float(&acc)[4][4]) {
    const int i0 = mi * 16 + qr;
    if (pairs && mi * 16 + 16 <= len && n0 + 32 <= cols) {  // warp-uniform
      TK* const p = dst + i0 * stride + n0 + qc;
      TK* const q = p + 8 * stride;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        *reinterpret_cast<uint32_t*>(p + 8 * t) = pack2<TK>(acc[t][0], acc[t][1]);
        *reinterpret_cast<uint32_t*>(q + 8 * t) = pack2<TK>(acc[t][2], acc[t][3]);
      }
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = i0 + 8 * h;
      if (i >= len) continue;
      TK* const row = dst + i * stride;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int c = n0 + 8 * t + qc;
        const float o0 = acc[t][2 * h], o1 = acc[t][2 * h + 1];
        if (c >= cols) continue;
        if (pairs) {
          *reinterpret_cast<uint32_t*>(row + c) = pack2<TK>(o0, o1);
        } else {
          row[c] = from_float<TK>(o0);
          if (c + 1 < cols) row[c + 1] = from_float<TK>(o1);
        }
      }
    }
  });
}

}  // namespace fuseops::detail::cuda::gdn
