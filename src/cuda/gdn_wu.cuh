// Device routines of w = A (beta e^g k) and u = A (beta v) shared by recompute_w_u_fwd (gdn_recompute.cu) and the
// forward's fused intra-chunk kernel (gdn_intra_fwd.cu): both round the operands and the products through these, so
// the fused kernel gives the same bytes as chunk_gated_delta_rule_fwd_kkt_solve followed by recompute_w_u_fwd.
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

/// Y[i][c] = X[i][c] times f1[i] (and then f2[i]), rounded once to TK, for rows i < rows and columns c < cols rounded
/// up to 8 (X and Y both [.][ld], ld a multiple of 8 and 16-byte aligned rows; Y may be X): 16-byte groups of 8
/// elements dealt to threads t, t + n, ... (t in [0, n): all of the block, or a subset of its warps). THE operand
/// scaling of w and u (beta e^g k, beta v, as FLA). The columns past `cols` in the last group only feed output columns
/// that are never stored.
template <typename TK>
__device__ void scale_rows(const TK* X, TK* Y, int ld, int rows, int cols, const float* f1, const float* f2, int t,
                           int n) {
  const int groups = (cols + 7) / 8;
  // group u = i * groups + g of this thread: t, t + n, ...; (i, g) advanced without a division per group
  int i = t / groups, g = t - i * groups;
  const int di = n / groups, dg = n - di * groups;
  while (i < rows) {
    const int c = g * 8;
    const float a = f1[i], b = f2 ? f2[i] : 1.f;
    union {
      uint4 raw;
      TK e[8];
    } x;
    x.raw = *reinterpret_cast<const uint4*>(X + i * ld + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float y = to_float(x.e[e]) * a;
      x.e[e] = from_float<TK>(f2 ? y * b : y);
    }
    *reinterpret_cast<uint4*>(Y + i * ld + c) = x.raw;
    i += di;
    g += dg;
    if (g >= groups) g -= groups, ++i;
  }
}

/// scale_rows by the whole block.
template <typename TK>
__device__ void scale_rows(const TK* X, TK* Y, int ld, int rows, int cols, const float* f1, const float* f2) {
  scale_rows(X, Y, ld, rows, cols, f1, f2, static_cast<int>(threadIdx.x), kThreads);
}

/// As[i][j] = the fp32 tile's (I + A)^{-1} [i][j] rounded once to TK for j <= i, 0 above the diagonal (rows < BT):
/// the inverse as the separate chunk_gated_delta_rule_fwd_kkt_solve stores it and recompute_w_u_fwd reads it. Groups
/// of 8 columns per thread.
template <typename TK, int BT>
__device__ void round_inverse(const float* tile, TK* As) {
  constexpr int kGroups = BT / 8;
  for (int u = static_cast<int>(threadIdx.x); u < BT * kGroups; u += kThreads) {
    const int i = u / kGroups, j0 = (u - i * kGroups) * 8;
    const float4 lo = *reinterpret_cast<const float4*>(tile + i * kTileLd<BT> + j0);
    const float4 hi = *reinterpret_cast<const float4*>(tile + i * kTileLd<BT> + j0 + 4);
    const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    union {
      uint4 raw;
      TK e[8];
    } x;
#pragma unroll
    for (int e = 0; e < 8; ++e) x.e[e] = from_float<TK>(j0 + e > i ? 0.f : f[e]);
    *reinterpret_cast<uint4*>(As + i * kLdA<BT> + j0) = x.raw;
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
