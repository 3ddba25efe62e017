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
#include "cuda/mma.cuh"
#include "cuda/vec.cuh"
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

/// The chunk of slot `slot` (resolve_chunk, recorded by the blocks with blockIdx.y == 0), looked up by warp 0 and
/// shared with the whole block through `shared`; begins and ends with a block barrier.
template <int BT>
__device__ ChunkRef block_chunk(const GdnGeometry& geo, int64_t slot, DeviceErrorRecord* errors, ChunkRef& shared) {
  __syncthreads();
  if (threadIdx.x < 32) {
    const ChunkRef c = resolve_chunk<BT>(geo, slot, errors, blockIdx.y == 0);
    if (threadIdx.x == 0) shared = c;
  }
  __syncthreads();
  return shared;
}

// ---------------------------------------------------------------------------------------------------------------
// 16-bit tiles of the tensor-core kernels (gdn_recompute.cu, gdn_fwd_h.cu)

/// Whether the rows of a [B, T, heads, dim] view can move as 16-byte vectors of 16-bit elements: dim, the strides and
/// the base a multiple of 8 elements / 16 bytes.
inline bool rows_16b(const void* data, int64_t dim, int64_t stride_b, int64_t stride_t, int64_t stride_h) {
  return reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && dim % 8 == 0 && stride_b % 8 == 0 &&
         stride_t % 8 == 0 && stride_h % 8 == 0;
}
inline bool rows_16b(const GdnIn& x, int64_t dim) { return rows_16b(x.data, dim, x.stride_b, x.stride_t, x.stride_h); }
inline bool rows_16b(const GdnOut& x, int64_t dim) { return rows_16b(x.data, dim, x.stride_b, x.stride_t, x.stride_h); }
/// Whether an output view takes 2-element stores at every even column of every row: the base aligned to two
/// elements and the strides even (the caller decides what an odd last column does).
inline bool rows_pairs(const GdnOut& x) {
  return reinterpret_cast<std::uintptr_t>(x.data) % (2 * dtype_size(x.dtype)) == 0 && x.stride_b % 2 == 0 &&
         x.stride_t % 2 == 0 && x.stride_h % 2 == 0;
}

/// Global rows (row stride `stride`, `rows` x `cols` valid) -> shared tile [prows][ld] with `pcols` columns (a multiple
/// of 8), zero past the valid part. `vec`: 16-byte cp.async copies (cols a multiple of 8, rows 16-byte aligned; the
/// caller commits and waits), else element loads. Called by all `threads` threads of the block. UNROLL: of the
/// cp.async loop (each kernel keeps the unroll its registers were sized and measured with).
template <int UNROLL, typename T>
__device__ __forceinline__ void load_tile_rows(T* dst, int ld, int prows, int pcols, const T* src, int64_t stride,
                                               int rows, int cols, bool vec, int threads) {
  if (vec) {
    const int per_row = pcols / 8;
#pragma unroll UNROLL
    for (int u = static_cast<int>(threadIdx.x); u < prows * per_row; u += threads) {
      const int i = u / per_row, c = (u - i * per_row) * 8;
      const bool ok = i < rows && c < cols;
      cp_async_16(dst + i * ld + c, ok ? src + i * stride + c : src, ok);
    }
  } else {
#pragma unroll 1
    for (int u = static_cast<int>(threadIdx.x); u < prows * pcols; u += threads) {
      const int i = u / pcols, c = u - i * pcols;
      dst[i * ld + c] = (i < rows && c < cols) ? src[i * stride + c] : from_float<T>(0.f);
    }
  }
}
/// load_tile_rows with a tile of ROWS rows (the chunk: BT), the cp.async loop unrolled UNROLL times.
template <typename T, int ROWS, int UNROLL = 4>
__device__ __forceinline__ void load_tile(T* dst, int ld, int pcols, const T* src, int64_t stride, int rows, int cols,
                                          bool vec, int threads) {
  load_tile_rows<UNROLL>(dst, ld, ROWS, pcols, src, stride, rows, cols, vec, threads);
}

/// Shared tile [rows][ld] -> global rows (row stride `stride`), `cols` columns. `vec`: 16-byte stores (cols, stride
/// and dst 16-byte multiples), else element stores.
template <typename T>
__device__ __forceinline__ void store_tile(T* dst, int64_t stride, const T* src, int ld, int rows, int cols, bool vec,
                                           int threads) {
  if (vec) {
    const int per_row = cols / 8;
#pragma unroll 4
    for (int u = static_cast<int>(threadIdx.x); u < rows * per_row; u += threads) {
      const int i = u / per_row, c = (u - i * per_row) * 8;
      *reinterpret_cast<uint4*>(dst + i * stride + c) = *reinterpret_cast<const uint4*>(src + i * ld + c);
    }
  } else {
#pragma unroll 1
    for (int u = static_cast<int>(threadIdx.x); u < rows * cols; u += threads) {
      const int i = u / cols, c = u - i * cols;
      dst[i * stride + c] = src[i * ld + c];
    }
  }
}

/// The 16-bit type of a run-time dtype (f16 / bf16) for dispatch; f32 has none.
template <typename F>
bool with_16bit(DType dt, F&& f) {
  if (dt == DType::f16) {
    f(__half{});
    return true;
  }
  if (dt == DType::bf16) {
    f(__nv_bfloat16{});
    return true;
  }
  return false;
}

}  // namespace fuseops::detail::cuda::gdn
