// The forward's prologue (l2norm of q and k, chunk-local cumsum of g) inside the warp intra kernel
// (gdn_intra_fwd_warp.cu, its prologue form): the routines a unit (chunk, value head hv) runs on its own chunk. Each
// gives the bytes of the prologue kernel (gdn_recompute.cu, l2norm_cumsum_kernel): the l2norm is gdn_l2norm.cuh's at
// the vector form's L lanes per row (K = 8 L 16-bit columns), the cumsum chunk_local_cumsum's sequential loop
// (gdn_cumsum.cuh). A key head's q and kn rows are shared out over its G = HV / H value heads' units: unit hv writes
// the rows r with r % G == hv % G.
#pragma once

#include <cstdint>

#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_intra_warp.cuh"
#include "cuda/gdn_l2norm.cuh"
#include "cuda/vec.cuh"

namespace fuseops::detail::cuda::gdn::warp_unit {

/// The eight 16-bit values of a 16-byte group, as f32 (exact).
template <typename TK>
__device__ __forceinline__ void unpack8(const uint4& w, float (&v)[8]) {
  const TK* const e = reinterpret_cast<const TK*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = to_float(e[i]);
}

/// Eight floats rounded once to TK, as one 16-byte group (FloatVec::store_whole's words).
template <typename TK>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
  return make_uint4(pack2<TK>(v[0], v[1]), pack2<TK>(v[2], v[3]), pack2<TK>(v[4], v[5]), pack2<TK>(v[6], v[7]));
}

/// The rows r in [0, len) with r % group == j of q's chunk `ch` (key head hk) l2-normalised into qn, as the prologue
/// kernel's vector form at L lanes per row (one 16-byte vector per lane): L / 2 vectors per lane loaded at once (16
/// rows per round trip), then each row's sum, rstd and store. Every lane of the warp must call it.
template <typename TK, int L>
__device__ void normalize_q_rows(const GdnIn& q, const GdnOut& qn, const ChunkRef& ch, int64_t hk, int j, int group) {
  constexpr int kRows = 32 / L, kBatch = L / 2;
  const int lane = static_cast<int>(threadIdx.x % 32), sub = lane % L;
  const int count = j < ch.len ? (ch.len - 1 - j) / group + 1 : 0;  // the unit's rows, warp-uniform
  const TK* const src = static_cast<const TK*>(q.data) + at(q, ch.batch, ch.t0, hk) + 8 * sub;
  TK* const dst = static_cast<TK*>(qn.data) + at(qn, ch.batch, ch.t0, hk) + 8 * sub;
  for (int i0 = 0; i0 < count; i0 += kRows * kBatch) {
    FloatVec<TK, 8> v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kRows + lane / L;
      if (i < count) {
        v[b].load(src + static_cast<int64_t>(j + i * group) * q.stride_t);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[b].v[e] = 0.f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kRows + lane / L;
      const float rstd = l2_rstd<L>(l2_squares(v[b].v, 0.f));
      if (i < count) {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[b].v[e] = __fmul_rn(v[b].v[e], rstd);
        v[b].store_whole(dst + static_cast<int64_t>(j + i * group) * qn.stride_t);
      }
    }
  }
}

/// The k rows [0, len) of the warp's tile X (SwizzledRows, K = 8 L columns) l2-normalised in place, as the prologue
/// kernel's vector form; each row's rstd -> rstd[row]; rows r with r % group == j also stored to kn (key head hk).
/// Rows past len (zero) stay zero. Every lane of the warp must call it; a warp barrier must follow before other lanes
/// read the tile.
template <typename TK, int L>
__device__ void normalize_k_tile(unsigned char* X, float* rstd, const ChunkRef& ch, const GdnOut& kn, int64_t hk,
                                 int j, int group) {
  constexpr int kRows = 32 / L;
  const int lane = static_cast<int>(threadIdx.x % 32), sub = lane % L;
  const SwizzledRows lay;
  TK* const dst = static_cast<TK*>(kn.data) + at(kn, ch.batch, ch.t0, hk) + 8 * sub;
  for (int r0 = 0; r0 < ch.len; r0 += kRows) {  // warp-uniform; r < 64 (kRows divides 64)
    const int r = r0 + lane / L;
    uint4* const p = reinterpret_cast<uint4*>(X + lay.row(r) + lay.col(r % 8, 8 * sub));
    float v[8];
    unpack8<TK>(*p, v);
    const float rs = l2_rstd<L>(l2_squares(v, 0.f));
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = __fmul_rn(v[e], rs);
    if (r < ch.len) {
      const uint4 y = pack8<TK>(v);
      *p = y;
      if (sub == 0) rstd[r] = rs;
      if (r % group == j) store_global_whole(reinterpret_cast<uint4*>(dst + r * kn.stride_t), y);
    }
  }
}

/// The raw k rows [0, len) of X (reloaded) scaled by their rstd from normalize_k_tile: the same bytes it gave them.
template <typename TK, int L>
__device__ void rescale_k_tile(unsigned char* X, const float* rstd, int len) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const SwizzledRows lay;
  for (int e = lane; e < len * L; e += 32) {
    const int r = e / L, c = 8 * (e % L);
    uint4* const p = reinterpret_cast<uint4*>(X + lay.row(r) + lay.col(r % 8, c));
    float v[8];
    unpack8<TK>(*p, v);
    const float rs = rstd[r];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(v[i], rs);
    *p = pack8<TK>(v);
  }
}

/// g of the chunk's rows [0, len), value head hv (rows past len: 0), from g of any float dtype.
__device__ __forceinline__ float load_raw_gate(const GdnIn& g, const ChunkRef& ch, int64_t hv, int t) {
  if (t >= ch.len) return 0.f;
  return load_f(g.data, g.dtype, at(g, ch.batch, ch.t0 + t, hv));
}

/// gate[0, len) := its chunk-local cumsum, chunk_local_cumsum's sequential loop (scale 1) by lane 0; then the lanes
/// store it into gcum's rows (value head hv). Rows past len keep their 0. Every lane must call it.
__device__ __forceinline__ void cumsum_gate(float* gate, const ChunkRef& ch, const GdnOut& gcum, int64_t hv) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  __syncwarp();
  if (lane == 0) {
    float s = 0.f;
#pragma unroll 8
    for (int e = 0; e < ch.len; ++e) {
      s = __fadd_rn(s, gate[e]);
      gate[e] = __fmul_rn(s, 1.f);
    }
  }
  __syncwarp();
  float* const dst = static_cast<float*>(gcum.data) + at(gcum, ch.batch, ch.t0, hv);
  for (int r = lane; r < ch.len; r += 32) dst[r * gcum.stride_t] = gate[r];
}

}  // namespace fuseops::detail::cuda::gdn::warp_unit
