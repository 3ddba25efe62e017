// CUDA backend of moe_route: up to kFusedMaxTokens tokens (and not E > 256 with a bias), one launch of a thread
// block cluster whose blocks route a contiguous range of tokens each (one warp per token, moe_topk.cuh) and then
// build the schedule of those tokens' ids together (moe_align.cuh); otherwise, the router kernel over the whole GPU
// and then the schedule kernel (two launches, the second overlapping the first's tail through programmatic
// dependent launch). Both paths run the same device code as topk_softmax / grouped_topk and moe_align_block_size,
// so the results are identical.
#include <algorithm>

#include "cuda/moe_launch.h"

namespace fuseops::detail::cuda {
namespace {

/// Tokens up to which one cluster routes and schedules (about one token per warp at 8 blocks of 32 warps).
constexpr int64_t kFusedMaxTokens = 256;

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
  for (int t = tlo + warp; t < thi; t += warps) route_token<T, VPT, BIAS>(rp, t, keys, lane);
  __syncthreads();  // this block's ids are in global memory, visible to the block
  align_schedule<1>(ap, tlo * rp.k, thi * rp.k, smem);
}

}  // namespace

void route_and_align(const char* op, const RouteArgs& r, const AlignArgs& a, int device, void* stream) {
  // One cluster of up to 8 blocks, about 32 tokens each; the schedule holds one id per lane (rounds 1).
  const int64_t cluster_wanted = std::min<int64_t>(kMaxCluster, std::max<int64_t>(1, (r.T + 31) / 32));
  const unsigned cluster = is_sm90_or_newer(device) ? static_cast<unsigned>(cluster_wanted) : 1u;
  const int warps = moe_align_warps(a.E, 1, kMoeAlignSmemWords);
  const int64_t chunk = (r.T + cluster - 1) / cluster;
  // With a bias and 16+ experts per lane the router needs more than the 64 registers of a 1024-thread block (it
  // would spill hundreds of bytes per thread, past what L1 holds beside the schedule's shared memory).
  const bool spills = r.bias.data != nullptr && route_vpt(r.E) >= 16;
  if (r.T > kFusedMaxTokens || spills || warps < 1 || (chunk * r.k + warps - 1) / warps > 32) {
    route(op, r, device, stream);
    align(op, a, device, stream);
    return;
  }
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const RouteParams rp = route_params(r);
  const AlignParams ap = align_params(a, device);
  const std::size_t align_smem = static_cast<std::size_t>(moe_align_smem_words(warps, a.E, 1)) * sizeof(int);
  dispatch_route(r.logits.dtype, r.E, rp.bias != nullptr, [&](auto t, auto vpt, auto bias) {
    auto kernel = route_align_kernel<typename decltype(t)::type, decltype(vpt)::value, decltype(bias)::value>;
    const std::size_t smem = std::max<std::size_t>(align_smem, sizeof(float) * route_scratch_floats(decltype(vpt)::value) * warps);
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * warps), smem, s, device, cluster, rp, ap);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
