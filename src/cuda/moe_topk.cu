// CUDA backend of topk_softmax and grouped_topk: one warp per token (moe_topk.cuh; the packed router of
// moe_packed.cuh for 16-bit logits without a bias or group selection), kRouteWarps warps per block, a grid-stride
// loop over tokens; several tokens per warp for small E without groups (route_token_lanes) and for groups of 32
// experts (moe_grouped32.cuh) from kGroups32MinTokens tokens, one block per token with one warp per group of 32
// experts below that (moe_group_warps.cuh).
#include <algorithm>

#include "cuda/moe_group_warps.cuh"
#include "cuda/moe_grouped32.cuh"
#include "cuda/moe_launch.h"
#include "cuda/moe_threshold.cuh"

namespace fuseops::detail::cuda {
namespace {

template <typename T, int VPT, bool BIAS>
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(RouteParams p) {
  __shared__ float keys[kRouteWarps][route_scratch_floats(VPT)];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  prefetch_logits_l2<T>(p, static_cast<int>(blockIdx.x) * kRouteWarps + warp, 1, lane);
  pdl_wait_and_release();
  for (int t = static_cast<int>(blockIdx.x) * kRouteWarps + warp; t < p.T;
       t += static_cast<int>(gridDim.x) * kRouteWarps) {
    route_token<T, VPT, BIAS>(p, t, keys[warp], lane);
  }
}

/// The packed router (moe_packed.cuh): 16-bit logits, no bias, every group kept, VPT >= 2.
template <typename T, int VPT>
__global__ void __launch_bounds__(kRouteWarps * 32) route_packed_kernel(RouteParams p) {
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  prefetch_logits_l2<T>(p, static_cast<int>(blockIdx.x) * kRouteWarps + warp, 1, lane);
  pdl_wait_and_release();
  for (int t = static_cast<int>(blockIdx.x) * kRouteWarps + warp; t < p.T;
       t += static_cast<int>(gridDim.x) * kRouteWarps) {
    route_token_packed<T, VPT>(p, t, lane);
  }
}

/// The threshold router (moe_threshold.cuh), falling back to the packed router per token. At VPT 16 its 64
/// registers (the packed router's; 72-80 uncapped with both paths inlined) let 32 warps per SM run: 4096 tokens in
/// one wave on 132 SMs; at VPT 32, 128 (the packed router alone takes 116).
template <typename T, int VPT>
__global__ void __launch_bounds__(kRouteWarps * 32, VPT == 16 ? 8 : 4) route_threshold_kernel(RouteParams p) {
  __shared__ __align__(16) uint32_t sh[kRouteWarps][kThresholdScratchWords];
  __shared__ __align__(16) uint32_t raw[kRouteWarps][kThresholdRawWords<VPT>];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  prefetch_logits_l2<T>(p, static_cast<int>(blockIdx.x) * kRouteWarps + warp, 1, lane);
  pdl_wait_and_release();
  for (int t = static_cast<int>(blockIdx.x) * kRouteWarps + warp; t < p.T;
       t += static_cast<int>(gridDim.x) * kRouteWarps) {
    if (!route_token_threshold<T, VPT>(p, t, lane, sh[warp], raw[warp])) route_token_packed<T, VPT>(p, t, lane);
  }
}

/// One block of n_group warps per token (moe_group_warps.cuh).
template <typename T, bool BIAS>
__global__ void __launch_bounds__(1024) route_group_warps_kernel(RouteParams p) {
  __shared__ GroupWarpsScratch sh;
  const int t = static_cast<int>(blockIdx.x), warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (warp == 0) prefetch_logits_l2<T>(p, t, 1, lane);
  if (BIAS && warp == 1) prefetch_bias_l2(p, lane);
  pdl_wait_and_release();
  route_group_warps_rank<T, BIAS>(p, t, sh, warp, lane);
  __syncthreads();
  if (warp == 0) route_group_warps_select<BIAS>(p, t, sh, lane);
}

/// 32 / L tokens per warp (route_token_lanes): for E <= L without group selection, at many tokens.
template <typename T, int L>
__global__ void __launch_bounds__(kRouteWarps * 32) route_lanes_kernel(RouteParams p) {
  pdl_wait_and_release();
  constexpr int kPerWarp = 32 / L;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int first = (static_cast<int>(blockIdx.x) * kRouteWarps + warp) * kPerWarp;
  const int step = static_cast<int>(gridDim.x) * kRouteWarps * kPerWarp;
  for (int t0 = first; t0 < p.T; t0 += step) route_token_lanes<T, L>(p, t0 + lane / L, lane);  // warp-uniform
}

/// 32 / L tokens per warp (route_groups32): grouped routing with n_group == L groups of 32 experts. Registers are
/// capped (about 120 uncapped with a bias: the sigmoids' reciprocals all in flight): 64 for the halves variant with
/// 16-bit logits (DeepSeek-V3; no spills): 8 blocks per SM, so that 16384 tokens (1 024 blocks) run in one wave;
/// for the other 16-bit variants 96, with f32 logits 128 (32 registers of logits held across the bias staging).
template <typename T, int L, bool BIAS, bool HALVES>
__global__ void __launch_bounds__(kRouteWarps * 32, sizeof(T) == 4 ? 4 : HALVES ? 8 : 5)
    route_groups32_kernel(RouteParams p) {
  __shared__ __align__(16) float bias_sh[BIAS ? kGroups32MaxExperts : 4];
  __shared__ __align__(16) uint32_t halves[kRouteWarps][kGroups32HalvesWords];
  __shared__ __align__(16) uint32_t cand[kRouteWarps][HALVES ? kGroups32CandWarpWords : 4];
  constexpr int kPerWarp = 32 / L;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int first = (static_cast<int>(blockIdx.x) * kRouteWarps + warp) * kPerWarp;
  prefetch_logits_l2<T>(p, first, kPerWarp, lane);
  // The bias by the first block only: every block prefetching the same lines (1024 blocks at 16384 tokens) measured
  // 1.26 us slower cold; the first block is placed first, while the previous kernel's last blocks run.
  if (BIAS && blockIdx.x == 0 && warp == 1) prefetch_bias_l2(p, lane);
  pdl_wait_and_release();
  const int step = static_cast<int>(gridDim.x) * kRouteWarps * kPerWarp;
  // With a bias, the first token's logits are loaded before the bias is staged (the two loads' latencies overlap
  // instead of adding up: the staging ends with a barrier of the block).
  Group32Logits<T> g;
  if constexpr (BIAS) {
    load_group32<T, L>(p, first + lane / L, lane, g);
    stage_bias32(p, bias_sh);
  }
  for (int t0 = first; t0 < p.T; t0 += step) {
    if (!BIAS || t0 != first) load_group32<T, L>(p, t0 + lane / L, lane, g);
    route_groups32<T, L, BIAS, HALVES>(p, t0 + lane / L, lane, bias_sh, halves[warp], cand[warp], g);  // warp-uniform
  }
}

/// Launches route_groups32_kernel with L lanes per token.
template <int L>
void launch_groups32(const char* op, const RouteParams& p, DType dtype, cudaStream_t s, int device) {
  constexpr int per_block = kRouteWarps * (32 / L);
  const int64_t blocks = std::min<int64_t>((p.T + per_block - 1) / per_block, 16 * sm_count(device));
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    auto kernel = p.bias ? route_groups32_kernel<T, L, true, false> : route_groups32_kernel<T, L, false, false>;
    if (groups32_halves(p)) {
      kernel = p.bias ? route_groups32_kernel<T, L, true, true> : route_groups32_kernel<T, L, false, true>;
    }
    // 18 KB of shared memory per block (24.4 KB with the candidates of HALVES): the largest carveout keeps 8 blocks
    // (64 registers) resident per SM.
    prefer_carveout(kernel, cudaSharedmemCarveoutMaxShared, op);
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kRouteWarps * 32), 0, s, device, p);
  });
}

/// Tokens from which small-E routing packs several tokens into a warp (below, one token per warp has the shorter
/// dependent chain: one redux per maximum instead of log2(L) shuffles).
constexpr int64_t kLanesMinTokens = 1024;

}  // namespace

bool threshold_route_enabled() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_THRESHOLD");
  return on;
}

bool moe_prefetch_enabled() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_PREFETCH");
  return on;
}

namespace {

/// The groups-of-32 router's candidate ranks (RouteParams::ranks); FUSEOPS_MOE_GROUPS32_RANKS=0 switches them off.
bool groups32_ranks_enabled() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_GROUPS32_RANKS");
  return on;
}

}  // namespace

RouteParams route_params(const RouteArgs& a) {
  RouteParams p{};
  p.logits = a.logits.data;
  p.logits_stride = a.logits.row_stride;
  p.bias = a.bias.data;
  p.bias_stride = a.bias.stride;
  p.bias_dtype = static_cast<int>(a.bias.dtype);
  p.weights = static_cast<float*>(a.weights.data);
  p.weights_stride = a.weights.row_stride;
  p.ids = a.ids.data;
  p.ids_stride = a.ids.row_stride;
  p.ids_i64 = a.ids.dtype == DType::i64;
  p.src_rows = static_cast<int32_t*>(a.src_rows.data);
  p.src_stride = a.src_rows.row_stride;
  p.T = static_cast<int>(a.T);
  p.E = static_cast<int>(a.E);
  p.k = static_cast<int>(a.k);
  p.n_group = a.n_group;
  p.topk_group = a.topk_group;
  p.softmax = a.scoring == MoeScoring::softmax;
  p.renormalize = a.renormalize;
  p.scale = a.scale;
  p.inv_k = 1.0f / static_cast<float>(p.k);  // IEEE division: the device's div.rn (computed by every warp before)
  p.prefetch = moe_prefetch_enabled();
  p.ranks = groups32_ranks_enabled();
  return p;
}

void route(const char* op, const RouteArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const RouteParams p = route_params(args);
  if (args.T >= kLanesMinTokens && args.E <= 16 && args.topk_group >= args.n_group) {
    const int lanes = args.E <= 8 ? 8 : 16, per_block = kRouteWarps * (32 / lanes);
    const int64_t blocks = std::min<int64_t>((args.T + per_block - 1) / per_block, 16 * sm_count(device));
    with_float_type(args.logits.dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      launch_kernel(lanes == 8 ? route_lanes_kernel<T, 8> : route_lanes_kernel<T, 16>,
                    dim3(static_cast<unsigned>(blocks)), dim3(kRouteWarps * 32), 0, s, device, p);
    });
    after_launch(op, s, device);
    return;
  }
  if (const int lanes = groups32_lanes(p); lanes != 0 && args.T >= kGroups32MinTokens) {
    if (lanes == 8) launch_groups32<8>(op, p, args.logits.dtype, s, device);
    else launch_groups32<16>(op, p, args.logits.dtype, s, device);
    after_launch(op, s, device);
    return;
  }
  if (args.T < kGroups32MinTokens && group_warps_shape(p.E, p.n_group, p.topk_group, p.k, p.softmax)) {
    with_float_type(args.logits.dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      launch_kernel(p.bias ? route_group_warps_kernel<T, true> : route_group_warps_kernel<T, false>,
                    dim3(static_cast<unsigned>(args.T)), dim3(32 * p.n_group), 0, s, device, p);
    });
    after_launch(op, s, device);
    return;
  }
  const int64_t blocks = std::min<int64_t>((args.T + kRouteWarps - 1) / kRouteWarps, 16 * sm_count(device));
  if (packed_route_call(p, args.logits.dtype)) {
    const bool threshold = threshold_route_call(p, args.logits.dtype) && threshold_route_enabled();
    dispatch_route(args.logits.dtype, args.E, false, [&](auto t, auto vpt, auto) {
      using T = typename decltype(t)::type;
      constexpr int VPT = decltype(vpt)::value;
      if constexpr (packed_route_type<T, VPT, false>()) {
        auto kernel = route_packed_kernel<T, VPT>;
        if constexpr (threshold_route_type<T, VPT, false>()) {
          if (threshold) {
            kernel = route_threshold_kernel<T, VPT>;
            // 5-9 KB of shared memory per block (the raw logits): a carveout of a quarter keeps 8 blocks resident.
            prefer_carveout(kernel, 25, op);
          }
        }
        launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kRouteWarps * 32), 0, s, device, p);
      }
    });
    after_launch(op, s, device);
    return;
  }
  dispatch_route(args.logits.dtype, args.E, p.bias != nullptr, [&](auto t, auto vpt, auto bias) {
    launch_kernel(route_kernel<typename decltype(t)::type, decltype(vpt)::value, decltype(bias)::value>,
                  dim3(static_cast<unsigned>(blocks)), dim3(kRouteWarps * 32), 0, s, device, p);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
