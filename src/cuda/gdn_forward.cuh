// Device helpers of the GDN forward kernels (gdn_recompute.cu, gdn_fwd_h.cu, gdn_fwd_o.cu, gdn_decode.cu): element
// access in a run-time dtype (the branch is uniform across the block) and the launch geometry shared with the
// intra-chunk kernels (chunk slots, gdn_intra.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/gdn_forward_common.h"
#include "cuda/gdn_intra.cuh"
#include "cuda/launch.h"
#include "ops/gdn_forward_impl.h"

namespace fuseops::detail::cuda::gdn {

/// Element i of a float tensor of run-time dtype, as f32.
__device__ __forceinline__ float load_f(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
/// Rounds v once to the dtype and stores it at element i.
__device__ __forceinline__ void store_f(void* p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}
__device__ __forceinline__ int64_t at(const GdnIn& x, int64_t b, int64_t t, int64_t h) {
  return b * x.stride_b + t * x.stride_t + h * x.stride_h;
}
__device__ __forceinline__ int64_t at(const GdnOut& x, int64_t b, int64_t t, int64_t h) {
  return b * x.stride_b + t * x.stride_t + h * x.stride_h;
}

/// Grid extents: x up to INT_MAX, y and z up to 65535 (kernels loop past them).
inline unsigned grid_x(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, INT_MAX))); }
inline unsigned grid_y(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, 65535))); }

/// Slot of h for the chunk that resolve_chunk() returned for chunk slot `slot`: the chunk's index in its batch row
/// (fixed length: slot = b * NT + c) or the slot itself (varlen; see gdn_chunk_slots()).
__device__ __forceinline__ int64_t state_slot(const GdnGeometry& geo, int64_t slot, const ChunkRef& ch) {
  if (geo.cu_seqlens) return slot;
  return ch.t0 / geo.BT;
}


}  // namespace fuseops::detail::cuda::gdn
