// CUDA backend of moe_route, one launch where the GPU allows it:
// - up to kReplicateMaxTokens tokens (and the small schedule's limits): independent blocks of 8 warps (no cluster),
//   each routing every token itself (one token per warp; with 8 groups of 32 experts, up to
//   kReplicateGroupsMaxTokens tokens, one token at a time with the group-warps router), keeping the ids in its
//   shared memory, then computing the whole schedule from them and writing its share (align_small); block 0 alone
//   stores the router's outputs. No barrier between blocks and no round trip of the ids through global memory;
// - up to kFusedSmallMaxTokens tokens and kMoeAlignSmallMaxIds ids (and kMoeAlignSmallMaxExperts experts): a thread
//   block cluster of blocks of 8 warps routes one token per warp (moe_topk.cuh), meets at a cluster barrier (the
//   ids in global memory, visible to the cluster), and every block then computes the whole schedule from all ids
//   and writes its share of it (align_small, moe_align.cuh); up to kFusedGroupsMaxTokens tokens with 8 groups of 32
//   experts (DeepSeek-V3) the blocks route one token at a time with the group-warps router (moe_group_warps.cuh);
// - up to kFusedMaxTokens tokens (and not E > 256 with a bias): a cluster whose blocks of up to 32 warps route a
//   contiguous range of tokens each and then build the schedule of those tokens' ids together (align_schedule);
// - otherwise, the router kernel over the whole GPU and then the schedule kernel (two launches, the second
//   overlapping the first's tail through programmatic dependent launch).
// Every path runs the same device code as topk_softmax / grouped_topk and moe_align_block_size, so the results are
// identical.
#include <algorithm>
#include <cstdlib>

#include "cuda/moe_group_warps.cuh"
#include "cuda/moe_launch.h"

namespace fuseops::detail::cuda {
namespace {

/// Tokens up to which one cluster routes and schedules (about one token per warp at 8 blocks of 32 warps).
constexpr int64_t kFusedMaxTokens = 256;
/// Tokens up to which the small fused path runs (one token per warp on a cluster of kMaxCluster blocks of
/// kMoeAlignSmallWarps warps), when the ids also fit the small schedule.
constexpr int64_t kFusedSmallMaxTokens = kMaxCluster * kMoeAlignSmallWarps;
/// Tokens up to which the small fused path routes with the group-warps router where it applies: one token per block
/// of a full cluster (measured, DeepSeek-V3: 1 token 5.68 us against 7.28 with one token per warp; 16 tokens, two per
/// block, 8.69 against 8.45).
constexpr int64_t kFusedGroupsMaxTokens = kMaxCluster;

/// Tokens up to which every block of the small fused path routes all tokens itself (one token per warp: the
/// blocks' routing is the same chain as one block's); FUSEOPS_MOE_ROUTE_REPLICATE=<n> moves it (0: off), for A/B.
constexpr int64_t kReplicateMaxTokens = kMoeAlignSmallWarps;
/// The same with the group-warps router (one token per block at a time: the chain grows with the tokens);
/// FUSEOPS_MOE_ROUTE_REPLICATE_GROUPS=<n> moves it.
constexpr int64_t kReplicateGroupsMaxTokens = 2;

int64_t env_tokens(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::max<long long>(0, std::strtoll(v, nullptr, 10));
}

int64_t replicate_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE", kReplicateMaxTokens);
  return n;
}

int64_t replicate_groups_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE_GROUPS", kReplicateGroupsMaxTokens);
  return n;
}

/// This block's view of the replicated path: the router's ids also go to `ids_sh` (shared memory), and only block 0
/// stores the router's outputs; the schedule reads the ids from `ids_sh` ([T, k], i32).
struct Replica {
  RouteParams rp;
  AlignParams ap;
  __device__ Replica(const RouteParams& r, const AlignParams& a, int* ids_sh) : rp(r), ap(a) {
    rp.ids_copy = ids_sh;
    rp.skip_outputs = blockIdx.x != 0;
    ap.ids = ids_sh;
    ap.ids_stride = r.k;
    ap.ids_cols = r.k;
    ap.ids_i64 = 0;
  }
};

/// Replicated small fused path, one token per warp: `ids_at` is the shared-memory word where the ids start (after
/// the router's scratch and the schedule's words).
template <typename T, int VPT, bool BIAS>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_replicated_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_rep[];
  const Replica r(rp, ap, smem_rep + ids_at);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  float* keys = reinterpret_cast<float*>(smem_rep) + warp * route_scratch_floats(VPT);
  for (int t = warp; t < rp.T; t += kMoeAlignSmallWarps) route_token_any<T, VPT, BIAS>(r.rp, t, keys, lane);
  __syncthreads();  // the ids in shared memory; the scratch is free
  align_small(r.ap, smem_rep, gridDim.x, blockIdx.x);
}

/// Replicated small fused path with the group-warps router (n_group == kMoeAlignSmallWarps groups of 32).
template <typename T, bool BIAS>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_groups_replicated_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_rep_groups[];
  const Replica r(rp, ap, smem_rep_groups + ids_at);
  auto& sh = *reinterpret_cast<GroupWarpsScratch*>(smem_rep_groups);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  for (int t = 0; t < rp.T; ++t) {
    route_group_warps_rank<T, BIAS>(r.rp, t, sh, warp, lane);
    __syncthreads();
    if (warp == 0) route_group_warps_select<BIAS>(r.rp, t, sh, lane);
    __syncthreads();  // warp 0 is done with the scratch; the ids in shared memory
  }
  align_small(r.ap, smem_rep_groups, gridDim.x, blockIdx.x);
}

/// The ids of the small fused path in the cluster's shared memory: block r holds those of the flat indices
/// [r chunk, (r + 1) chunk) at `local` (the same offset in every block), read through distributed shared memory.
struct PeerIds {
  int* local;
  int chunk;
  __device__ __forceinline__ int operator()(const AlignParams& p, int i) const {
    const int r = i / chunk;
    const int id = cluster_peer(local, static_cast<unsigned>(r))[i - r * chunk];
    return id < -1 || id >= p.E ? -2 : id;  // the router's ids are always in range
  }
};

/// Whether the small fused path exchanges the ids through distributed shared memory (else through global memory);
/// FUSEOPS_MOE_ROUTE_DSMEM=0 turns it off (A/B).
bool route_dsmem() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_ROUTE_DSMEM");
  return on;
}

/// The small fused path, one token per warp. DSMEM: each block also keeps its tokens' ids in its shared memory at
/// word `ids_at` (one token per warp: block r's tokens are [8 r, 8 r + 8), so cluster * 8 >= T), and the schedule
/// reads them from the blocks of the cluster; a last cluster barrier keeps them alive until every block has read
/// them. Else the schedule reads the ids from global memory.
template <typename T, int VPT, bool BIAS, bool DSMEM>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_small_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_small[];  // align_small zeroes with 16-byte stores
  int* smem = smem_small;
  const unsigned cl = cluster_blocks(), rank = cluster_rank();
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  float* keys = reinterpret_cast<float*>(smem) + warp * route_scratch_floats(VPT);
  RouteParams q = rp;
  if constexpr (DSMEM) {
    q.ids_copy = smem + ids_at;
    q.ids_copy_t0 = static_cast<int>(rank) * kMoeAlignSmallWarps;
  }
  for (int t = static_cast<int>(rank) * kMoeAlignSmallWarps + warp; t < rp.T;
       t += static_cast<int>(cl) * kMoeAlignSmallWarps) {
    route_token_any<T, VPT, BIAS>(q, t, keys, lane);
  }
  // Every block's ids are in its shared and global memory, visible to the cluster (release / acquire); the scratch
  // is free.
  cluster_arrive(cl);
  cluster_wait(cl);
  __syncthreads();  // the same for a single block, where the cluster barrier is a no-op
  if constexpr (DSMEM) {
    align_small<PeerIds>(ap, smem, cl, rank, PeerIds{smem + ids_at, kMoeAlignSmallWarps * rp.k});
    cluster_arrive(cl);  // no block leaves while another may still read its ids
    cluster_wait(cl);
  } else {
    align_small(ap, smem, cl, rank);
  }
}

/// The small fused path with the group-warps router (moe_group_warps.cuh): n_group == kMoeAlignSmallWarps groups of
/// 32, one token per block at a time.
template <typename T, bool BIAS>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps) route_align_groups_kernel(RouteParams rp, AlignParams ap) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_groups[];
  auto& sh = *reinterpret_cast<GroupWarpsScratch*>(smem_groups);
  const unsigned cl = cluster_blocks(), rank = cluster_rank();
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  for (int t = static_cast<int>(rank); t < rp.T; t += static_cast<int>(cl)) {
    route_group_warps_rank<T, BIAS>(rp, t, sh, warp, lane);
    __syncthreads();
    if (warp == 0) route_group_warps_select<BIAS>(rp, t, sh, lane);
    __syncthreads();  // warp 0 is done with the scratch
  }
  cluster_arrive(cl);
  cluster_wait(cl);
  __syncthreads();
  align_small(ap, smem_groups, cl, rank);
}

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

/// The small fused path (see the top of the file); false when it does not apply.
bool route_align_small(const char* op, const RouteArgs& r, const AlignArgs& a, int device, cudaStream_t s) {
  const int64_t numel = r.T * r.k;
  if (r.T > kFusedSmallMaxTokens || numel > align_small_max_ids() || a.E > kMoeAlignSmallMaxExperts) return false;
  const RouteParams rp = route_params(r);
  const AlignParams ap = align_params(a, device);
  // The group-warps router (one token per block at a time) where it applies and the tokens are few.
  const bool groups = r.T <= kFusedGroupsMaxTokens && rp.n_group == kMoeAlignSmallWarps &&
                      group_warps_shape(rp.E, rp.n_group, rp.topk_group, rp.k, rp.softmax);
  // Blocks: one per token (group warps) or per 8 tokens, or more where the schedule's outputs want them
  // (moe_align_small_blocks), at most a portable cluster; one block before sm_90.
  const int64_t per_block = groups ? 1 : kMoeAlignSmallWarps;
  const int64_t wanted =
      std::max<int64_t>((r.T + per_block - 1) / per_block, moe_align_small_blocks(a.sorted_len + a.blocks, a.E));
  const unsigned cluster =
      is_sm90_or_newer(device) ? static_cast<unsigned>(std::min<int64_t>(kMaxCluster, wanted)) : 1u;
  const std::size_t align_smem = static_cast<std::size_t>(moe_align_small_smem_words(a.E)) * sizeof(int);
  // Replicated: every block routes all tokens (no cluster); the ids after the scratch and the schedule's words.
  const bool replicate = r.T > 0 && r.T <= (groups ? replicate_groups_max_tokens() : replicate_max_tokens());
  if (replicate) {
    const unsigned blocks = static_cast<unsigned>(moe_align_small_blocks(a.sorted_len + a.blocks, a.E));
    auto go = [&](auto kernel, std::size_t scratch) {
      const std::size_t ids_at = (std::max(align_smem, scratch) + 15) / 16 * 16;
      const std::size_t smem = ids_at + static_cast<std::size_t>(numel) * sizeof(int);
      allow_smem(kernel, smem, op);
      launch_kernel(kernel, dim3(blocks), dim3(32 * kMoeAlignSmallWarps), smem, s, device, rp, ap,
                    static_cast<int>(ids_at / sizeof(int)));
    };
    if (groups) {
      with_float_type(r.logits.dtype, [&](auto t) {
        using T = typename decltype(t)::type;
        go(rp.bias ? route_align_groups_replicated_kernel<T, true> : route_align_groups_replicated_kernel<T, false>,
           sizeof(GroupWarpsScratch));
      });
    } else {
      dispatch_route(r.logits.dtype, r.E, rp.bias != nullptr, [&](auto t, auto vpt, auto bias) {
        constexpr int VPT = decltype(vpt)::value;
        go(route_align_replicated_kernel<typename decltype(t)::type, VPT, decltype(bias)::value>,
           sizeof(float) * route_scratch_floats(VPT) * kMoeAlignSmallWarps);
      });
    }
    return true;
  }
  if (groups) {
    with_float_type(r.logits.dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      auto kernel = rp.bias ? route_align_groups_kernel<T, true> : route_align_groups_kernel<T, false>;
      const std::size_t smem = std::max<std::size_t>(align_smem, sizeof(GroupWarpsScratch));
      allow_smem(kernel, smem, op);
      launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * kMoeAlignSmallWarps), smem, s, device, cluster, rp, ap);
    });
    return true;
  }
  const bool dsmem = route_dsmem() && int64_t{cluster} * kMoeAlignSmallWarps >= r.T;
  dispatch_route(r.logits.dtype, r.E, rp.bias != nullptr, [&](auto t, auto vpt, auto bias) {
    using TT = typename decltype(t)::type;
    constexpr int VPT = decltype(vpt)::value;
    constexpr bool B = decltype(bias)::value;
    auto kernel = dsmem ? route_align_small_kernel<TT, VPT, B, true> : route_align_small_kernel<TT, VPT, B, false>;
    const std::size_t ids_at =
        (std::max<std::size_t>(align_smem, sizeof(float) * route_scratch_floats(VPT) * kMoeAlignSmallWarps) + 15) /
        16 * 16;
    const std::size_t smem = ids_at + sizeof(int) * kMoeAlignSmallWarps * static_cast<std::size_t>(r.k);
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * kMoeAlignSmallWarps), smem, s, device, cluster, rp, ap,
                          static_cast<int>(ids_at / sizeof(int)));
  });
  return true;
}

}  // namespace

/// Tokens above which moe_route always launches the router and the schedule separately (kFusedMaxTokens);
/// FUSEOPS_MOE_ROUTE_FUSED_MAX=<n> moves it (A/B of the fused kernels against two launches).
int64_t fused_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_FUSED_MAX", kFusedMaxTokens);
  return n;
}

void route_and_align(const char* op, const RouteArgs& r, const AlignArgs& a, int device, void* stream) {
  // Two launches above the fused paths' tokens, and for the group-warps router's shapes (DeepSeek-V3) above the
  // fused group path's tokens: its own launch (a block per token) has a much shorter chain than the fused kernels'
  // one warp per token (measured at 16 / 64 tokens: 8.8 / 9.2 us fused against 6.2 / 6.6 as two launches).
  const bool separate =
      r.T > fused_max_tokens() ||
      (r.T > kFusedGroupsMaxTokens && group_warps_shape(static_cast<int>(r.E), r.n_group, r.topk_group,
                                                        static_cast<int>(r.k), r.scoring == MoeScoring::softmax));
  if (separate) {
    if (r.T > 0) route(op, r, device, stream);
    align(op, a, device, stream);
    return;
  }
  {
    DeviceGuard guard(device, op);
    auto s = static_cast<cudaStream_t>(stream);
    if (route_align_small(op, r, a, device, s)) {
      after_launch(op, s, device);
      return;
    }
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
    if (r.T > 0) route(op, r, device, stream);  // no tokens: nothing to route (a grid of 0 blocks is an error)
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
    const std::size_t smem =
        std::max<std::size_t>(align_smem, sizeof(float) * route_scratch_floats(decltype(vpt)::value) * warps);
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * warps), smem, s, device, cluster, rp, ap);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
