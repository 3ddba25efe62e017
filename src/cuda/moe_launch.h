// Launch shapes shared by the MoE kernels (moe_topk.cu, moe_align.cu, moe_route.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/launch.h"
#include "cuda/moe_align.cuh"
#include "cuda/moe_packed.cuh"
#include "ops/moe_impl.h"

namespace fuseops::detail::cuda {

/// Largest (portable) cluster.
constexpr int64_t kMaxCluster = 8;
/// Warps per block of the router kernel.
constexpr int kRouteWarps = 4;

/// Variant of the schedule kernel for `numel` ids over E experts and `out_words` output words (sorted_token_ids +
/// expert_ids) on `device` (moe_align_plan).
MoeAlignPlan align_plan(int64_t numel, int64_t E, int64_t out_words, int device);
/// The small schedule variant's id limit: kMoeAlignSmallMaxIds, or -1 (off, in moe_align_block_size and moe_route)
/// when the environment sets FUSEOPS_MOE_ALIGN_SMALL=0 (for A/B measurements without a rebuild).
int64_t align_small_max_ids();
/// Whether align_after_route fills the padding before the PDL wait: true unless the environment sets
/// FUSEOPS_MOE_ROUTE_PREFILL=0 (then align(); for A/B measurements without a rebuild).
bool align_small_prefill_enabled();
/// align() launched right after a router kernel of the same moe_route call (route()): the small variant then fills
/// its outputs' padding before the PDL wait (align_small_after_route_kernel), overlapping the router. Only there.
void align_after_route(const char* op, const AlignArgs& args, int device, void* stream);
/// Kernel parameters of the schedule.
AlignParams align_params(const AlignArgs& a, int device);
/// Kernel parameters of a router.
RouteParams route_params(const RouteArgs& a);
/// Whether the threshold router (moe_threshold.cuh) may run: false when the environment sets
/// FUSEOPS_MOE_THRESHOLD=0 (the packed router then takes its calls; for A/B measurements without a rebuild).
bool threshold_route_enabled();
/// Whether the MoE kernels (routers, the small schedule variant) prefetch their inputs into L2 before the PDL wait:
/// true unless the environment sets FUSEOPS_MOE_PREFETCH=0 (for A/B measurements without a rebuild).
bool moe_prefetch_enabled();


}  // namespace fuseops::detail::cuda
