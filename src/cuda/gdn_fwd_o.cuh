// Pieces shared by the tensor-core kernels of chunk_fwd_o (gdn_fwd_o_mma.cu, gdn_fwd_o_wgmma.cu).
#pragma once

#include <cstdint>

#include "cuda/gdn_forward.cuh"

namespace fuseops::detail::cuda {
namespace fwd_o {

/// Which inputs allow 16-byte copies (bits of the kernel's `vec`), whether o takes two-element stores, and whether o
/// is of the inputs' dtype.
enum : unsigned { kVecQ = 1u, kVecK = 2u, kVecV = 4u, kVecH = 8u, kPairO = 16u, kNativeO = 32u };

/// Stores x at element i of o and, when `two`, y at i + 1, rounded to o's dtype; `pair`: one 2-element store
/// (i even and o's base aligned to two elements).
__device__ __forceinline__ void store_two(const GdnOut& o, int64_t i, float x, float y, bool two, bool pair) {
  if (two && pair) {
    switch (o.dtype) {
      case DType::f16: *reinterpret_cast<__half2*>(static_cast<__half*>(o.data) + i) = __floats2half2_rn(x, y); return;
      case DType::bf16:
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(o.data) + i) = __floats2bfloat162_rn(x, y);
        return;
      default: *reinterpret_cast<float2*>(static_cast<float*>(o.data) + i) = make_float2(x, y); return;
    }
  }
  gdn::store_f(o.data, o.dtype, i, x);
  if (two) gdn::store_f(o.data, o.dtype, i + 1, y);
}

/// Score entry (i, j) of the chunk: s exp(g_i - g_j) for j <= i < len (s without g), 0 above the diagonal and in
/// rows past the chunk (never stored; their g is a placeholder 0), by a select without a branch (the exponent is
/// formed for every entry and may be inf above the diagonal; the select drops it). exp by kkt_exp (ex2.approx.ftz of
/// the rounded (g_i - g_j) log2(e): __expf's bits wherever the factor is >= 2^-126, 0 below, without __expf's
/// three-instruction subnormal fix on each entry; relative error ~2^-21, far below the rounding of P to the input
/// dtype). Every tensor-core kernel of the output takes its scores from here, so they give the same bytes.
__device__ __forceinline__ float gated_score(float s, int i, int j, int len, float g_i, float g_j, bool gated) {
  const float e = gated ? gdn::kkt_exp(g_i - g_j) : 1.f;
  return j <= i && i < len ? s * e : 0.f;
}

/// acc of an m64nN accumulator block (N / 2 registers: rows lane / 4 in d[4 t], d[4 t + 1], rows lane / 4 + 8 in
/// d[4 t + 2], d[4 t + 3]) with its first row times ea and its second times eb.
template <int R>
__device__ __forceinline__ void scale_rows(float (&acc)[R], float ea, float eb) {
#pragma unroll
  for (int t = 0; t < R / 4; ++t) {
    acc[4 * t + 0] *= ea;
    acc[4 * t + 1] *= ea;
    acc[4 * t + 2] *= eb;
    acc[4 * t + 3] *= eb;
  }
}

/// Launch-time constants: the work items are (chunk slot, key head, part, V block), the V blocks innermost; each
/// item walks value heads [hv_begin, hv_end) of its key head (all G of them unless the grid would be small).
struct FwdOParams {
  int64_t slots;
  int vblocks;        ///< blocks of BV columns of V
  int group;          ///< G = HV / H
  int heads_per_cta;  ///< value heads per item
  int parts;          ///< items per (chunk slot, key head, V block)
  unsigned vec;       ///< kVec* / kPairO bits
  DeviceErrorRecord* errors;
};

/// A work item: its chunk slot and chunk (len 0: nothing to do), key head, first column of V and value heads
/// [hv_begin, hv_end).
struct FwdOItem {
  int64_t slot;
  gdn::ChunkRef ch;
  int hk, v0, hv_begin, hv_end;
};

/// Item `item` of a grid of `units` items per chunk slot and V blocks of `bv` columns. The chunk is looked up by warp 0
/// and shared through `shared`: begins with a block barrier (the previous item may still read `shared` and the block's
/// tiles) and ends with one.
template <int BT>
__device__ FwdOItem fwd_o_item(const FwdOArgs& a, const FwdOParams& prm, int64_t item, int units, int bv,
                               gdn::ChunkRef& shared) {
  FwdOItem it;
  it.slot = item / units;
  const int u = static_cast<int>(item - it.slot * units);
  __syncthreads();
  if (threadIdx.x < 32) {
    const gdn::ChunkRef ch = gdn::resolve_chunk<BT>(a.geo, it.slot, prm.errors, u == 0);
    if (threadIdx.x == 0) shared = ch;
  }
  __syncthreads();
  it.ch = shared;
  const int key_part = u / prm.vblocks;
  it.hk = key_part / prm.parts;
  it.v0 = (u - key_part * prm.vblocks) * bv;
  it.hv_begin = it.hk * prm.group + (key_part - it.hk * prm.parts) * prm.heads_per_cta;
  it.hv_end = min(it.hv_begin + prm.heads_per_cta, (it.hk + 1) * prm.group);
  return it;
}

/// The launch constants of a grid of V blocks of `bv` columns: the G value heads of a key head in one item (one q / k
/// tile, one q k^T), split over several items only when (chunks x key heads x V blocks) cannot fill two blocks per
/// SM; o's store bits (kPairO, kNativeO); the error record for varlen. `vec`'s input bits are the caller's.
inline FwdOParams fwd_o_params(const FwdOArgs& a, int bv, int device) {
  FwdOParams prm{};
  prm.slots = gdn::chunk_slots(a.geo);
  prm.vblocks = static_cast<int>((a.V + bv - 1) / bv);
  const int64_t group = a.geo.HV / a.geo.H;
  const gdn::HeadSplit split = gdn::split_value_heads(prm.slots * a.geo.H * prm.vblocks, group, 2LL * sm_count(device));
  prm.group = static_cast<int>(group);
  prm.heads_per_cta = split.heads_per_cta;
  prm.parts = split.parts;
  if (gdn::rows_pairs(a.o)) prm.vec |= kPairO;
  if (a.o.dtype == a.q.dtype) prm.vec |= kNativeO;
  prm.errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  return prm;
}

/// Items of the grid (chunk slots x key heads x parts x V blocks).
inline int64_t fwd_o_items(const FwdOArgs& a, const FwdOParams& prm) {
  return prm.slots * a.geo.H * prm.parts * prm.vblocks;
}

}  // namespace fwd_o
}  // namespace fuseops::detail::cuda
