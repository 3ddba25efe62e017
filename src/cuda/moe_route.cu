// CUDA backend of moe_route. By default (measured fastest at 1-64 tokens) two launches for the small schedule's
// shapes; the one-launch paths below stay for A/B through their switches (token limits 0: off):
// - up to kReplicateMaxTokens tokens from kReplicateMinExperts experts (and the small schedule's limits:
//   kMoeAlignSmallMaxIds ids, kMoeAlignSmallMaxExperts experts): independent blocks of 8 warps (no cluster), each
//   routing every token itself (one token per warp at a time; with 8 groups of 32 experts, up to
//   kReplicateGroupsMaxTokens tokens, one token at a time with the group-warps router; with E <= 16 and no group
//   selection, up to kReplicateLanesMaxTokens tokens, 32 / L tokens per warp at a time) into its shared memory, then
//   computing the whole schedule from those ids and writing its share (align_small); block 0 then copies the
//   router's outputs out. No barrier between blocks and no round trip of the ids through global memory;
// - with 8 groups of 32 experts (DeepSeek-V3) up to kFusedGroupsMaxTokens tokens: a thread block cluster whose
//   blocks route one token at a time with the group-warps router (moe_group_warps.cuh), meet at a cluster barrier
//   (the ids in global memory, visible to the cluster), and every block then computes the whole schedule (align_small);
// - up to kFusedMaxTokens tokens, except where the small schedule applies up to kTwoLaunchMaxTokens tokens (measured
//   faster as two launches) and for the group-warps router's shapes (and not E > 256 with a bias): a cluster whose
//   blocks of up to 32 warps route a contiguous range of tokens each and then build the schedule of those tokens'
//   ids together (align_schedule);
// - otherwise, the router kernel over the whole GPU and then the schedule kernel (two launches, the second
//   overlapping the first's tail through programmatic dependent launch; the small schedule variant fills its padding
//   before its PDL wait, i.e. while the router runs: align_after_route).
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
/// Tokens up to which the small schedule's shapes launch the router and the schedule separately rather than fused
/// on a cluster (measured at 16 and 64 tokens, qwen3-next and qwen3-moe: 7.00 / 7.85 and 5.77 / 6.05 us as two
/// launches against 7.33 / 9.27 and 6.15 / 6.55 fused).
constexpr int64_t kTwoLaunchMaxTokens = kMaxCluster * kMoeAlignSmallWarps;
/// Tokens up to which the fused group path routes with the group-warps router (one token per block of a full
/// cluster; measured, DeepSeek-V3: 1 token 5.68 us against 7.28 with one token per warp; 16 tokens, two per block,
/// 8.69 against 8.45); above, the group-warps shapes take two launches (16 / 64 tokens 5.93 / 6.68 us against 8.80 /
/// 9.23 fused with one warp per token). Off since two launches fill the schedule's padding before its PDL wait (1 /
/// 16 / 64 tokens 4.71 / 4.89 / 5.47 us; replicated at one token 4.79); FUSEOPS_MOE_ROUTE_FUSED_GROUPS=<n> moves it.
constexpr int64_t kFusedGroupsMaxTokens = 0;
/// Tokens up to which every block routes all tokens itself (one token per warp at a time: up to two per warp at 16),
/// from kReplicateMinExperts experts: off, two launches (the schedule filling its padding before the PDL wait)
/// measured faster at 1 to 64 tokens on every model (e.g. 1 x 512: 4.84 against 5.29 us; 16 x 512: 5.52 against
/// 8.34). FUSEOPS_MOE_ROUTE_REPLICATE=<n> and FUSEOPS_MOE_ROUTE_REPLICATE_MIN_EXPERTS=<n> move them, for A/B.
constexpr int64_t kReplicateMaxTokens = 0;
constexpr int64_t kReplicateMinExperts = 256;
/// The same with the lanes router (E <= 16 without group selection: 32 / L tokens per warp at a time, two rounds of
/// 8 lanes at 64 tokens); off (two launches measured faster: 3.68 / 4.17 / 4.00 us at 1 / 16 / 64 x 8 against 3.98 /
/// 4.16 / 5.74); FUSEOPS_MOE_ROUTE_REPLICATE_LANES=<n> moves it.
constexpr int64_t kReplicateLanesMaxTokens = 0;
/// The same with the group-warps router (one token per block at a time: the chain grows with the tokens); off (see
/// kFusedGroupsMaxTokens); FUSEOPS_MOE_ROUTE_REPLICATE_GROUPS=<n> moves it.
constexpr int64_t kReplicateGroupsMaxTokens = 0;

/// Prefetches into L2 the logits rows of tokens t0, t0 + step, ... (below T), with the calling warp: a replica's warp
/// loads a token's row only when it starts routing it, so without this every further token of the warp would wait
/// for its own DRAM load after the previous token's chain.
template <typename T>
__device__ __forceinline__ void prefetch_logits_rows(const RouteParams& p, int t0, int step, int lane) {
  for (int t = t0; t < p.T; t += step) {
    const char* row = static_cast<const char*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride * sizeof(T);
    const char* end = row + static_cast<int64_t>(p.E) * sizeof(T);
    for (const char* a = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{127}) + 128 * lane;
         a < end; a += 32 * 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
  }
}

int64_t env_tokens(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::max<long long>(0, std::strtoll(v, nullptr, 10));
}

int64_t replicate_max_tokens(int64_t E) {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE", kReplicateMaxTokens);
  static const int64_t min_e = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE_MIN_EXPERTS", kReplicateMinExperts);
  return E >= min_e ? n : 0;
}

int64_t replicate_groups_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE_GROUPS", kReplicateGroupsMaxTokens);
  return n;
}

/// kReplicateLanesMaxTokens, or FUSEOPS_MOE_ROUTE_REPLICATE_LANES=<n> (0: off), for A/B.
int64_t replicate_lanes_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_REPLICATE_LANES", kReplicateLanesMaxTokens);
  return n;
}

/// kFusedGroupsMaxTokens, or FUSEOPS_MOE_ROUTE_FUSED_GROUPS=<n> (0: off), for A/B.
int64_t fused_groups_max_tokens() {
  static const int64_t n = env_tokens("FUSEOPS_MOE_ROUTE_FUSED_GROUPS", kFusedGroupsMaxTokens);
  return n;
}

/// This block's view of the replicated path: the router's weights and ids go to shared memory ([T, k] each, i32
/// ids), and the schedule reads the ids from there.
struct Replica {
  RouteParams rp;
  AlignParams ap;
  __device__ Replica(const RouteParams& r, const AlignParams& a, int* ids_sh, float* w_sh) : rp(r), ap(a) {
    rp.weights = w_sh;
    rp.weights_stride = r.k;
    rp.ids = ids_sh;
    rp.ids_stride = r.k;
    rp.ids_i64 = 0;
    rp.src_rows = nullptr;
    ap.ids = ids_sh;
    ap.ids_stride = r.k;
    ap.ids_cols = r.k;
    ap.ids_i64 = 0;
  }
};

/// Block 0 of the replicated path copies the router's outputs from shared memory to those of `rp` (the values
/// store_token would have stored, token_expert_indices included), after the schedule: global stores issued before
/// the schedule's block barriers delayed the block (measured 0.3-0.4 us at one token).
__device__ __forceinline__ void store_replica_outputs(const RouteParams& rp, const int* ids_sh, const float* w_sh) {
  if (blockIdx.x != 0) return;
  const int n = rp.T * rp.k;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    const int t = i / rp.k, j = i - t * rp.k;
    rp.weights[static_cast<int64_t>(t) * rp.weights_stride + j] = w_sh[i];
    if (rp.ids_i64) static_cast<int64_t*>(rp.ids)[static_cast<int64_t>(t) * rp.ids_stride + j] = ids_sh[i];
    else static_cast<int32_t*>(rp.ids)[static_cast<int64_t>(t) * rp.ids_stride + j] = ids_sh[i];
    if (rp.src_rows) rp.src_rows[static_cast<int64_t>(t) * rp.src_stride + j] = j * rp.T + t;
  }
}

/// One block of the replicated path: the router's outputs go to this block's shared memory (`smem`: the router's
/// scratch, the schedule's words, then the ids at word `ids_at` and the weights), `route(rp)` routes every token into
/// them with the block's warps, and after a barrier the block computes the whole schedule from those ids and writes
/// its share; block 0 then copies the router's outputs out.
template <typename Route>
__device__ __forceinline__ void run_replica(const RouteParams& rp, const AlignParams& ap, int* smem, int ids_at,
                                            Route&& route) {
  int* ids_sh = smem + ids_at;
  float* w_sh = reinterpret_cast<float*>(ids_sh + rp.T * rp.k);
  const Replica r(rp, ap, ids_sh, w_sh);
  route(r.rp);
  __syncthreads();  // the router's outputs in shared memory; its scratch is free
  align_small(r.ap, smem, gridDim.x, blockIdx.x);
  store_replica_outputs(rp, ids_sh, w_sh);
}

/// Replicated path, one token per warp at a time.
template <typename T, int VPT, bool BIAS>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_replicated_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_rep[];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  prefetch_logits_rows<T>(rp, warp + kMoeAlignSmallWarps, kMoeAlignSmallWarps, lane);  // the warp's later tokens
  float* keys = reinterpret_cast<float*>(smem_rep) + warp * route_scratch_floats(VPT);
  run_replica(rp, ap, smem_rep, ids_at, [&](const RouteParams& shp) {
    for (int t = warp; t < rp.T; t += kMoeAlignSmallWarps) route_token_any<T, VPT, BIAS>(shp, t, keys, lane);
  });
}

/// Replicated path for E <= L experts without group selection: 32 / L tokens per warp at a time (route_token_lanes,
/// the router of topk_softmax from 1024 tokens, bitwise route_token's results), so the 8 warps route 32 (L 8) or 16
/// (L 16) tokens per round.
template <typename T, int L>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_lanes_replicated_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_lanes[];
  constexpr int kPerWarp = 32 / L, kRound = kMoeAlignSmallWarps * kPerWarp;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  for (int i = 0; i < kPerWarp; ++i) prefetch_logits_rows<T>(rp, warp * kPerWarp + i + kRound, kRound, lane);
  run_replica(rp, ap, smem_lanes, ids_at, [&](const RouteParams& shp) {
    for (int t0 = warp * kPerWarp; t0 < rp.T; t0 += kRound) route_token_lanes<T, L>(shp, t0 + lane / L, lane);
  });
}

/// Replicated path with the group-warps router (n_group == kMoeAlignSmallWarps groups of 32).
template <typename T, bool BIAS>
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps)
    route_align_groups_replicated_kernel(RouteParams rp, AlignParams ap, int ids_at) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_rep_groups[];
  auto& sh = *reinterpret_cast<GroupWarpsScratch*>(smem_rep_groups);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  prefetch_logits_rows<T>(rp, 1 + warp, kMoeAlignSmallWarps, lane);  // the tokens after the first
  run_replica(rp, ap, smem_rep_groups, ids_at, [&](const RouteParams& shp) {
    for (int t = 0; t < rp.T; ++t) {
      route_group_warps_rank<T, BIAS>(shp, t, sh, warp, lane);
      __syncthreads();
      if (warp == 0) route_group_warps_select<BIAS>(shp, t, sh, lane);
      if (t + 1 < rp.T) __syncthreads();  // warp 0 is done with the scratch (run_replica's barrier after the last)
    }
  });
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

/// Whether the small schedule applies to moe_route's ids (kMoeAlignSmallMaxIds ids, kMoeAlignSmallMaxExperts).
bool small_schedule(const RouteArgs& r, const AlignArgs& a) {
  return r.T * r.k <= align_small_max_ids() && a.E <= kMoeAlignSmallMaxExperts;
}

/// The replicated path and the fused group path (see the top of the file); false when neither applies.
bool route_align_small(const char* op, const RouteArgs& r, const AlignArgs& a, int device, cudaStream_t s) {
  if (!small_schedule(r, a)) return false;
  const int64_t numel = r.T * r.k;
  const RouteParams rp = route_params(r);
  const AlignParams ap = align_params(a, device);
  // The group-warps router (one token per block at a time) where it applies.
  const bool groups = rp.n_group == kMoeAlignSmallWarps &&
                      group_warps_shape(rp.E, rp.n_group, rp.topk_group, rp.k, rp.softmax);
  // The lanes router (32 / L tokens per warp) where it applies: E <= 16, no group selection.
  const bool lanes = r.E <= 16 && rp.topk_group >= rp.n_group;
  const std::size_t align_smem = static_cast<std::size_t>(moe_align_small_smem_words(a.E)) * sizeof(int);
  const int blocks = moe_align_small_blocks(a.sorted_len + a.blocks, a.E);
  // Replicated: every block routes all tokens; the ids and weights after the scratch and the schedule's words.
  auto go = [&](auto kernel, std::size_t scratch) {
    const std::size_t ids_at = (std::max(align_smem, scratch) + 15) / 16 * 16;
    const std::size_t smem = ids_at + static_cast<std::size_t>(numel) * (sizeof(int) + sizeof(float));
    allow_smem(kernel, smem, op);
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kMoeAlignSmallWarps), smem, s, device, rp,
                  ap, static_cast<int>(ids_at / sizeof(int)));
  };
  if (lanes && r.T > 0 && r.T <= replicate_lanes_max_tokens()) {
    with_float_type(r.logits.dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      go(r.E <= 8 ? route_align_lanes_replicated_kernel<T, 8> : route_align_lanes_replicated_kernel<T, 16>, 0);
    });
    return true;
  }
  if (r.T > 0 && r.T <= (groups ? replicate_groups_max_tokens() : replicate_max_tokens(r.E))) {
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
  if (!groups || r.T > fused_groups_max_tokens()) return false;
  // The fused group path: one block per token of a cluster, or more where the schedule's outputs want them, at most
  // a portable cluster; one block before sm_90.
  const int64_t wanted = std::max<int64_t>(r.T, blocks);
  const unsigned cluster =
      is_sm90_or_newer(device) ? static_cast<unsigned>(std::min<int64_t>(kMaxCluster, wanted)) : 1u;
  with_float_type(r.logits.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    auto kernel = rp.bias ? route_align_groups_kernel<T, true> : route_align_groups_kernel<T, false>;
    const std::size_t smem = std::max<std::size_t>(align_smem, sizeof(GroupWarpsScratch));
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(cluster), dim3(32 * kMoeAlignSmallWarps), smem, s, device, cluster, rp, ap);
  });
  return true;
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
  {
    DeviceGuard guard(device, op);
    auto s = static_cast<cudaStream_t>(stream);
    if (route_align_small(op, r, a, device, s)) {
      after_launch(op, s, device);
      return;
    }
  }
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
