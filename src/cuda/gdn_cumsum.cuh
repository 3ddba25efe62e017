// chunk_local_cumsum's device routine, shared by its own kernel (gdn_intra.cu, units of kCumsumHeads value heads) and
// by the forward's prologue kernel that also l2-normalises q and k (gdn_recompute.cu, units of 128 / BT heads): one
// warp per unit (chunk slot, group of NH value heads) through a [BT][NH] shared buffer per warp, one memory round trip
// per unit. The sums are those of a sequential loop per head (same order, same roundings), whichever kernel runs them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/device_error.h"
#include "cuda/gdn_intra.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda::gdn {

constexpr int kCumsumHeads = 8;  ///< heads per unit of chunk_local_cumsum's kernel (NH below)

/// Slot `ch`, heads [h0, h0 + nh) (nh <= NH) of chunk_local_cumsum through the warp's shared buffer `buf` [len][nh]:
/// the group's g elements loaded at once (element e = (token e / nh, head e % nh), at most BT NH / 32 per lane, all in
/// flight; coalesced where g is [.., T, HV] contiguous), then lane h sums its head in token order (reverse: from the
/// chunk's end) in place, then the warp stores the group. The sums are those of a sequential loop per head (same order,
/// same roundings).
template <int BT, int NH, typename TG>
__device__ void cumsum_group(const CumsumArgs& a, const ChunkRef& ch, int64_t h0, int nh, float scale, float* buf,
                             int lane) {
  constexpr int kPerLane = BT * NH / 32;
  const TG* const src =
      static_cast<const TG*>(a.g.data) + ch.batch * a.g.stride_b + ch.t0 * a.g.stride_t + h0 * a.g.stride_h;
  float* const dst =
      static_cast<float*>(a.out.data) + ch.batch * a.out.stride_b + ch.t0 * a.out.stride_t + h0 * a.out.stride_h;
  const int n = ch.len * nh, di = 32 / nh, dh = 32 % nh;  // element e + 32: token + di, head + dh (with carry)
  const int i0 = lane / nh, h0l = lane % nh;
  {
    float v[kPerLane];
    int i = i0, h = h0l;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      v[j] = lane + 32 * j < n ? to_float(src[i * a.g.stride_t + h * a.g.stride_h]) : 0.f;
      i += di;
      h += dh;
      if (h >= nh) {
        h -= nh;
        ++i;
      }
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (lane + 32 * j < n) buf[lane + 32 * j] = v[j];
    }
  }
  __syncwarp();
  if (lane < nh) {
    float s = 0.f;
#pragma unroll 8
    for (int e = 0; e < ch.len; ++e) {
      float* const x = buf + (a.reverse ? ch.len - 1 - e : e) * nh + lane;
      s = __fadd_rn(s, *x);
      *x = __fmul_rn(s, scale);
    }
  }
  __syncwarp();
  int i = i0, h = h0l;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (lane + 32 * j < n) dst[i * a.out.stride_t + h * a.out.stride_h] = buf[lane + 32 * j];
    i += di;
    h += dh;
    if (h >= nh) {
      h -= nh;
      ++i;
    }
  }
  __syncwarp();  // the buffer is reused by the warp's next unit
}

/// The units of chunk_local_cumsum (u = slot * groups + group, groups of NH heads) that this warp of block `block` of
/// `blocks` takes (kWarps warps per block, a grid-stride walk), through the warp's buffer `buf` [BT * NH]. Any NH gives
/// the same values (each head's sums run in its own sequential loop).
template <int BT, int NH>
__device__ void cumsum_units(const CumsumArgs& args, int64_t units, int64_t groups, float scale,
                             DeviceErrorRecord* errors, int64_t block, int64_t blocks, float* buf) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t u = block * kWarps + warp; u < units; u += blocks * kWarps) {
    const int64_t slot = u / groups, h0 = (u - slot * groups) * NH;
    const ChunkRef ch = resolve_chunk<BT>(args.geo, slot, errors, h0 == 0);
    if (ch.len == 0 || h0 >= args.geo.HV) continue;  // HV = 0: one unit per slot still checks the bounds
    const int nh = static_cast<int>(min(static_cast<int64_t>(NH), args.geo.HV - h0));
    switch (args.g.dtype) {
      case DType::f16: cumsum_group<BT, NH, __half>(args, ch, h0, nh, scale, buf, lane); break;
      case DType::bf16: cumsum_group<BT, NH, __nv_bfloat16>(args, ch, h0, nh, scale, buf, lane); break;
      default: cumsum_group<BT, NH, float>(args, ch, h0, nh, scale, buf, lane); break;
    }
  }
}

/// Launch constants of chunk_local_cumsum's units, for either kernel that runs them.
struct CumsumLaunch {
  int64_t units = 0, groups = 0;  ///< units = chunk slots x groups of `heads` value heads
  float scale = 1.f;
  DeviceErrorRecord* errors = nullptr;  ///< the device's error record where cu_seqlens is read, else null
};

/// The launch constants of `args` on `device` for units of `heads` heads (cumsum_units' NH); throws invalid_argument
/// (naming `op` and g) where the unit count does not fit in int64.
inline CumsumLaunch cumsum_launch(const CumsumArgs& args, int heads, const char* op, int device) {
  CumsumLaunch c;
  // at least one unit per slot (HV = 0 too: its sequence bounds are checked and a malformed cu_seqlens recorded)
  c.groups = std::max<int64_t>(1, (args.geo.HV + heads - 1) / heads);
  if (__builtin_mul_overflow(chunk_slots(args.geo), c.groups, &c.units)) {  // only zero strides over huge extents
    throw Error(ErrorKind::invalid_argument,
                std::string(op) + ": g: (chunk slots) x (value heads / " + std::to_string(heads) +
                    ") does not fit in int64");
  }
  c.scale = args.has_scale ? static_cast<float>(args.scale) : 1.f;
  c.errors = args.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  return c;
}

}  // namespace fuseops::detail::cuda::gdn
