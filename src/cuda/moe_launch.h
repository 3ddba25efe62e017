// Launch shapes shared by the MoE kernels (moe_topk.cu, moe_align.cu, moe_route.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/launch.h"
#include "cuda/moe_align.cuh"
#include "cuda/moe_topk.cuh"
#include "ops/moe_impl.h"

namespace fuseops::detail::cuda {

/// Shared memory budget of the schedule kernel, in int32 words (200 KiB of the 227 KiB an sm_90 block may have).
constexpr int64_t kAlignSmemWords = 200 * 1024 / 4;
/// Largest (portable) cluster, and the flat ids a block of the schedule should own before another joins.
constexpr int64_t kMaxCluster = 8;
constexpr int64_t kIdsPerBlock = 4096;
/// Warps per block of the router kernel.
constexpr int kRouteWarps = 4;

struct AlignShape {
  int warps = 32;
  std::size_t smem = 0;
  unsigned cluster = 1;
};

/// Warps, dynamic shared memory and cluster size of the schedule for `numel` ids over E experts.
AlignShape align_shape(int64_t numel, int64_t E, int device);
/// Kernel parameters of the schedule.
AlignParams align_params(const AlignArgs& a, int device);
/// Kernel parameters of a router.
RouteParams route_params(const RouteArgs& a);


}  // namespace fuseops::detail::cuda
