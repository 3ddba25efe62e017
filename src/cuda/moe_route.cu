// CUDA backend of moe_route:
// - up to kTwoLaunchMaxTokens tokens where the small schedule applies (kMoeAlignSmallMaxIds ids,
//   kMoeAlignSmallMaxExperts experts), and for the group-warps router's shapes (8 groups of 32 experts, DeepSeek-V3):
//   the router kernel and then the schedule kernel (two launches, the second overlapping the first's tail through
//   programmatic dependent launch; the small schedule variant fills its padding before its PDL wait, i.e. while the
//   router runs: align_after_route);
// - otherwise up to kFusedMaxTokens tokens (and not E > 256 with a bias): a cluster whose blocks of up to 32 warps
//   route a contiguous range of tokens each and then build the schedule of those tokens' ids together
//   (align_schedule);
// - otherwise the two launches, the wide schedule variant after the router with capped registers.
// Every path runs the same device code as topk_softmax / grouped_topk and moe_align_block_size, so the results are
// identical. (Tried and removed, measured slower than the two launches at 1-64 tokens on every model: blocks that
// each route every token into shared memory and compute the whole schedule, and a cluster routing one token per
// block with the group-warps router; docs/ops/moe-log.md, "Decode targets, second pass".)
#include <algorithm>

#include "cuda/moe_group_warps.cuh"
#include "cuda/moe_launch.h"

namespace fuseops::detail::cuda {
namespace {

/// Tokens up to which one cluster routes and schedules (about one token per warp at 8 blocks of 32 warps).
constexpr int64_t kFusedMaxTokens = 256;
/// Tokens up to which the small schedule's shapes launch the router and the schedule separately rather than fused
/// on a cluster (measured at 16 and 64 tokens, qwen3-next and qwen3-moe: 7.00 / 7.85 and 5.77 / 6.05 us as two
/// launches against 7.33 / 9.27 and 6.15 / 6.55 fused).
constexpr int64_t kTwoLaunchMaxTokens = 64;

/// The fused cluster path (see the top of the file): block r routes its tokens (one warp per token), then the
/// cluster builds the schedule of their ids.
template <typename T, int VPT, bool BIAS>
__global__ void __launch_bounds__(1024, 1) route_align_kernel(RouteParams rp, AlignParams ap) {
  pdl_wait_and_release();
  extern __shared__ int smem[];
  const int cl = static_cast<int>(cluster_blocks()), rank = static_cast<int>(cluster_rank());
  const int chunk = (rp.T + cl - 1) / cl;
  const int tlo = min(rp.T, rank * chunk), thi = min(rp.T, tlo + chunk);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  float* keys = reinterpret_cast<float*>(smem) + warp * route_scratch_floats(VPT);
  for (int t = tlo + warp; t < thi; t += warps) route_token_any<T, VPT, BIAS>(rp, t, keys, lane);
  __syncthreads();  // this block's ids are in global memory, visible to the block
  align_schedule<1>(ap, tlo * rp.k, thi * rp.k, smem);
}

/// Whether the small schedule applies to moe_route's ids (kMoeAlignSmallMaxIds ids, kMoeAlignSmallMaxExperts).
bool small_schedule(const RouteArgs& r, const AlignArgs& a) {
  return r.T * r.k <= align_small_max_ids() && a.E <= kMoeAlignSmallMaxExperts;
}

/// Two launches: the router, then the schedule (align_after_route: its padding before the PDL wait, overlapping the
/// router). No tokens: nothing to route (a grid of 0 blocks is an error), so the plain schedule kernel.
void route_then_align(const char* op, const RouteArgs& r, const AlignArgs& a, int device, void* stream) {
  if (r.T == 0) {
    align(op, a, device, stream);
    return;
  }
  route(op, r, device, stream);
  align_after_route(op, a, device, stream);
}

}  // namespace

void route_and_align(const char* op, const RouteArgs& r, const AlignArgs& a, int device, void* stream) {
  // Two launches for the small schedule's shapes up to kTwoLaunchMaxTokens tokens and for the group-warps router's
  // shapes (its own launch, a block per token, has a much shorter chain than one warp per token).
  const bool separate =
      (r.T <= kTwoLaunchMaxTokens && small_schedule(r, a)) ||
      group_warps_shape(static_cast<int>(r.E), r.n_group, r.topk_group, static_cast<int>(r.k),
                        r.scoring == MoeScoring::softmax);
  if (separate) {
    route_then_align(op, r, a, device, stream);
    return;
  }
  // One cluster of up to 8 blocks, about 32 tokens each; the schedule holds one id per lane (rounds 1).
  const int64_t cluster_wanted = std::min<int64_t>(kMaxCluster, std::max<int64_t>(1, (r.T + 31) / 32));
  const unsigned cluster = is_sm90_or_newer(device) ? static_cast<unsigned>(cluster_wanted) : 1u;
  const int warps = moe_align_warps(a.E, 1, kMoeAlignSmemWords);
  const int64_t chunk = (r.T + cluster - 1) / cluster;
  // With a bias and 16+ experts per lane the router needs more than the 64 registers of a 1024-thread block (it
  // would spill hundreds of bytes per thread, past what L1 holds beside the schedule's shared memory).
  const bool spills = r.bias.data != nullptr && route_vpt(r.E) >= 16;
  if (r.T > kFusedMaxTokens || spills || warps < 1 || (chunk * r.k + warps - 1) / warps > 32) {
    route_then_align(op, r, a, device, stream);
    return;
  }
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const RouteParams rp = route_params(r);
  const AlignParams ap = align_params(a, device);
  const std::size_t align_smem = static_cast<std::size_t>(moe_align_smem_words(warps, a.E, 1)) * sizeof(int);
  dispatch_route(r.logits.dtype, r.E, rp.bias != nullptr, [&](auto t, auto vpt, auto bias) {
    auto kernel = route_align_kernel<typename decltype(t)::type, decltype(vpt)::value, decltype(bias)::value>;
    const std::size_t smem =
        std::max<std::size_t>(align_smem, sizeof(float) * route_scratch_floats(decltype(vpt)::value) * warps);
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * warps), smem, s, device, cluster, rp, ap);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
