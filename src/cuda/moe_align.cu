// CUDA backend of moe_align_block_size: one launch (moe_align.cuh, moe_align_wide.cuh): the small variant
// (independent blocks, each computing the whole schedule) up to kMoeAlignSmallMaxIds ids; the wide variant
// (independent clusters, each counting all ids, every block placing its own slice) where moe_align_wide_plan applies;
// else the variant chosen by moe_align_plan: one block or a thread block cluster (ids per lane in registers,
// cluster size) or the streamed fallback.
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/launch.h"
#include "cuda/moe_align.cuh"
#include "cuda/moe_align_wide.cuh"
#include "cuda/moe_launch.h"
#include "ops/moe_impl.h"

namespace fuseops::detail::cuda {
namespace {

template <int ROUNDS>
__global__ void __launch_bounds__(32 * moe_align_max_warps(ROUNDS)) align_kernel(AlignParams p) {
  pdl_wait_and_release();
  extern __shared__ int smem[];
  const int cl = static_cast<int>(cluster_blocks()), rank = static_cast<int>(cluster_rank());
  const int chunk = (p.numel + cl - 1) / cl;
  const int lo = min(p.numel, rank * chunk), hi = min(p.numel, lo + chunk);
  align_schedule<ROUNDS>(p, lo, hi, smem);
}

/// Hints the L2 to fetch topk_ids (prefetch_rows_l2: one bulk prefetch when they are contiguous) with the calling
/// warp, before the PDL wait, so that their DRAM latency runs while the previous kernel finishes, as the routers do
/// with their logits (safe for the same reason: the L2 is the point of coherence and nothing reaches the SM). In a
/// model the previous kernel is usually the router that writes these ids, and there is nothing to overlap.
__device__ __forceinline__ void align_prefetch_ids(const AlignParams& p, int lane) {
  if (p.numel == 0) return;
  const int size = p.ids_i64 ? 8 : 4;
  if (p.ids_stride == p.ids_cols) {
    prefetch_rows_l2(p.ids, 0, p.numel * size, 1, lane);
  } else {
    prefetch_rows_l2(p.ids, p.ids_stride * size, p.ids_cols * size, p.numel / p.ids_cols, lane);
  }
}

/// The small variant of moe_align_block_size: one more warp fills the block's chunks of the outputs
/// (AlignSmallOut::kFillWarp) while the kMoeAlignSmallWarps others compute the schedule; `prefetch`: warp 0
/// prefetches the ids first (align_prefetch_ids).
__global__ void __launch_bounds__(32 * (kMoeAlignSmallWarps + 1)) align_small_fill_warp_kernel(AlignParams p,
                                                                                                 int prefetch) {
  if (prefetch && threadIdx.x < 32) align_prefetch_ids(p, static_cast<int>(threadIdx.x));
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_fill[];
  if (threadIdx.x >= 32 * kMoeAlignSmallWarps) {
    align_small_prefill(p, gridDim.x, blockIdx.x, static_cast<int>(threadIdx.x & 31), 32);
    __threadfence_block();  // the fill's stores ordered before the ids the schedule warps store over them
    asm volatile("bar.arrive %0, %1;" ::"n"(kAlignFillBarrier), "n"(32 * (kMoeAlignSmallWarps + 1)) : "memory");
    return;
  }
  align_small<AlignSmallOut::kFillWarp>(p, smem_fill, gridDim.x, blockIdx.x);
}

/// align_small_kernel for moe_route's two launches: the prefill of this block's chunks (align_small_prefill) runs
/// BEFORE the PDL wait, overlapping the router. Safe only right after a router kernel of the same moe_route call:
/// every router kernel waits for its predecessor before it releases its dependents, so when this kernel starts the
/// kernels before the router have completed, and the router does not touch sorted_token_ids or expert_ids (the
/// outputs do not overlap). Never launch it after any other kernel.
__global__ void __launch_bounds__(32 * kMoeAlignSmallWarps) align_small_after_route_kernel(AlignParams p,
                                                                                           int /*prefetch*/) {
  align_small_prefill(p, gridDim.x, blockIdx.x);  // (no id prefetch: the router has just written them)
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_after[];
  align_small<AlignSmallOut::kPrefilled>(p, smem_after, gridDim.x, blockIdx.x);
}

/// TRUSTED: moe_route's ids, from its own router (align_wide's TrustedIds).
template <int R, bool TRUSTED>
__global__ void __launch_bounds__(32 * kMoeAlignWideWarps, 1) align_wide_kernel(AlignParams p, int64_t slice) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_wide[];  // align_wide zeroes with 16-byte stores
  align_wide<R, TRUSTED>(p, slice, smem_wide);
}

/// align_wide_kernel after moe_route's router kernel, its registers capped (kAlignWideAfterRouteRegs: 40, 48 for 8
/// ids per lane and for trusted ids from 2, the fewest without spills; 54-62 uncapped) so that its blocks fit beside
/// up to three router blocks of 128 threads at 64 registers (the groups-of-32 router at 4096 tokens: 256 blocks,
/// about two per SM): under PDL its clusters are then resident and waiting when the router ends, instead of being
/// placed on SMs as they drain. FUSEOPS_MOE_ROUTE_WIDE_CAP=0 launches align_wide_kernel instead (A/B). TRUSTED as
/// align_wide_kernel.
template <int R, bool TRUSTED>
constexpr int kAlignWideAfterRouteRegs = R >= 8 || (TRUSTED && R >= 2) ? 48 : 40;
template <int R, bool TRUSTED>
__global__ void __maxnreg__((kAlignWideAfterRouteRegs<R, TRUSTED>))
    align_wide_after_route_kernel(AlignParams p, int64_t slice) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) int smem_wide_after[];
  align_wide<R, TRUSTED>(p, slice, smem_wide_after);
}

bool align_wide_cap_enabled() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_ROUTE_WIDE_CAP");
  return on;
}

/// Whether the wide schedule after moe_route's router takes its ids as TrustedIds (contiguous i32 ids; the routers
/// never write an id outside [0, E)); FUSEOPS_MOE_ROUTE_TRUSTED=0 switches it off (A/B).
bool align_wide_trusted(const AlignParams& p) {
  static const bool on = !env_switched_off("FUSEOPS_MOE_ROUTE_TRUSTED");
  return on && !p.ids_i64 && p.ids_stride == p.ids_cols && p.expert_map == nullptr;
}

/// The wide variant's id minimum: kMoeAlignWideMinIds; for A/B measurements without a rebuild the environment
/// variable FUSEOPS_MOE_ALIGN_WIDE=0 turns the variant off (-1) and FUSEOPS_MOE_ALIGN_WIDE=<n> (n > 0) moves the
/// minimum to n ids (the small variant still takes up to kMoeAlignSmallMaxIds).
int64_t align_wide_min_ids() {
  static const int64_t limit = [] {
    const int64_t n = env_count("FUSEOPS_MOE_ALIGN_WIDE", INT64_MAX);
    return n < 0 ? kMoeAlignWideMinIds : n == 0 ? int64_t{-1} : n;
  }();
  return limit;
}

/// The ids a block of the wide variant owns before the clusters double, after moe_route's router:
/// kMoeAlignWideOwnIds, or FUSEOPS_MOE_ROUTE_WIDE_OWN=<n> (n > 0; 0 or unset: the built-in) from the environment
/// (A/B).
int64_t align_wide_own_ids_after_route() {
  static const int64_t n = [] {
    const int64_t x = env_count("FUSEOPS_MOE_ROUTE_WIDE_OWN", INT64_MAX);
    return x > 0 ? x : kMoeAlignWideOwnIds;
  }();
  return n;
}

/// The wide variant (see the top of the file); false when moe_align_wide_plan does not apply.
bool align_wide_launch(const char* op, const AlignParams& p, int device, cudaStream_t s, bool after_route) {
  const int max_cluster = is_sm90_or_newer(device) ? static_cast<int>(kMaxCluster) : 1;
  const MoeAlignWidePlan w = moe_align_wide_plan(p.numel, p.E, max_cluster, kMoeAlignSmemWords, align_wide_min_ids(),
                                                 after_route ? align_wide_own_ids_after_route() : kMoeAlignWideOwnIds,
                                                 after_route);
  if (w.clusters == 0) return false;
  const std::size_t smem = static_cast<std::size_t>(w.smem_words) * sizeof(int);
  auto go = [&](auto kernel) {
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(w.clusters * w.cluster), dim3(32 * kMoeAlignWideWarps), smem, s, device,
                          static_cast<unsigned>(w.cluster), p, w.slice);
  };
  const bool cap = after_route && align_wide_cap_enabled();
  auto pick = [&](auto r, auto trusted) {
    constexpr int R = decltype(r)::value;
    constexpr bool TR = decltype(trusted)::value;
    go(cap ? align_wide_after_route_kernel<R, TR> : align_wide_kernel<R, TR>);
  };
  auto with_rounds = [&](auto trusted) {
    switch (w.rounds) {
      case 1: pick(std::integral_constant<int, 1>{}, trusted); break;
      case 2: pick(std::integral_constant<int, 2>{}, trusted); break;
      case 4: pick(std::integral_constant<int, 4>{}, trusted); break;
      default: pick(std::integral_constant<int, 8>{}, trusted); break;
    }
  };
  if (after_route && align_wide_trusted(p)) {
    with_rounds(std::true_type{});
  } else {
    with_rounds(std::false_type{});
  }
  return true;
}

/// The small variant's block count as moe_align_plan sets it, or FUSEOPS_MOE_ALIGN_SMALL_BLOCKS=<n> (1-64; 0 or
/// unset: the plan's) from the environment (moe_align_block_size and moe_route's two launches; for A/B measurements
/// without a rebuild).
int align_small_blocks(int planned) {
  static const int n = static_cast<int>(env_count("FUSEOPS_MOE_ALIGN_SMALL_BLOCKS", 64));
  return n > 0 ? n : planned;
}

}  // namespace

bool align_small_prefill_enabled() {
  static const bool on = !env_switched_off("FUSEOPS_MOE_ROUTE_PREFILL");
  return on;
}

int64_t align_small_max_ids() {
  static const int64_t limit = env_switched_off("FUSEOPS_MOE_ALIGN_SMALL") ? int64_t{-1} : kMoeAlignSmallMaxIds;
  return limit;
}

AlignParams align_params(const AlignArgs& a, int device) {
  AlignParams p{};
  p.ids = a.ids.data;
  p.ids_stride = a.ids.row_stride;
  p.ids_cols = static_cast<int>(std::max<int64_t>(a.ids.cols, 1));
  p.ids_i64 = a.ids.dtype == DType::i64;
  p.numel = static_cast<int>(a.ids.rows * a.ids.cols);
  p.sorted = a.sorted;
  p.sorted_len = static_cast<int>(a.sorted_len);
  p.expert_ids = a.expert_ids;
  p.blocks = static_cast<int>(a.blocks);
  p.total = a.total;
  p.expert_map = static_cast<const int32_t*>(a.expert_map.data);
  p.map_stride = a.expert_map.stride;
  p.E = static_cast<int>(a.E);
  p.block_size = static_cast<int>(a.block_size);
  p.record = cuda_error_record(device);
  p.ids_site = a.ids_site;
  p.map_site = a.map_site;
  return p;
}

MoeAlignPlan align_plan(int64_t numel, int64_t E, int64_t out_words, int device) {
  return moe_align_plan(numel, E, is_sm90_or_newer(device) ? static_cast<int>(kMaxCluster) : 1, kMoeAlignSmemWords,
                        out_words, align_small_max_ids());
}

namespace {

void align_launch(const char* op, const AlignArgs& args, int device, void* stream, bool after_route) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const AlignParams p = align_params(args, device);
  const MoeAlignPlan plan = align_plan(p.numel, args.E, args.sorted_len + args.blocks, device);
  const std::size_t smem = static_cast<std::size_t>(plan.smem_words) * sizeof(int);
  if (plan.replicas > 0) {
    const bool prefilled = after_route && align_small_prefill_enabled();
    auto kernel = prefilled ? align_small_after_route_kernel : align_small_fill_warp_kernel;
    allow_smem(kernel, smem, op);
    launch_kernel(kernel, dim3(static_cast<unsigned>(align_small_blocks(plan.replicas))),
                  dim3(32 * (plan.warps + (prefilled ? 0 : 1))), smem, s, device, p,
                  static_cast<int>(moe_prefetch_enabled()));
    after_launch(op, s, device);
    return;
  }
  if (align_wide_launch(op, p, device, s, after_route)) {
    after_launch(op, s, device);
    return;
  }
  auto go = [&](auto kernel) {
    allow_smem(kernel, smem, op);
    launch_kernel_cluster(kernel, dim3(plan.cluster), dim3(32 * plan.warps), smem, s, device,
                          static_cast<unsigned>(plan.cluster), p);
  };
  switch (plan.rounds) {
    case 1: go(align_kernel<1>); break;
    case 4: go(align_kernel<4>); break;
    case 16: go(align_kernel<16>); break;
    case 32: go(align_kernel<32>); break;
    default: go(align_kernel<0>); break;
  }
  after_launch(op, s, device);
}

}  // namespace

void align(const char* op, const AlignArgs& args, int device, void* stream) {
  align_launch(op, args, device, stream, false);
}

void align_after_route(const char* op, const AlignArgs& args, int device, void* stream) {
  align_launch(op, args, device, stream, true);
}

}  // namespace fuseops::detail::cuda
