// Warp-per-unit form of the fused chunk_gated_delta_rule_fwd_kkt_solve (chunk 64, f16 / bf16 k with K <= 128, f16 /
// bf16 output): one warp takes one (chunk, value head) from its k rows to the stored inverse, with no block barrier.
//
// Why: the block kernels (gdn_intra.cu) spread a unit over 8 warps that meet at block barriers, and most of their
// steps (the diagonal blocks, the level-16 merges) run on 2 of the 8; their profile is issue- and barrier-bound (~10k
// warp instructions per unit, docs/ops/gdn-log.md "Intra-chunk stage"). Here each warp runs the whole chain alone, and the
// A fragments that the 8 warps of a block merge each loaded again are loaded once. Many independent warps per SM (12:
// 17.9 KB of shared memory each) hide each other's latencies. Where the units are few per SM (at most 8), each SM
// runs only a few such chains: there the two warps of a 64-thread block take a unit together (kkt_solve_pair_kernel,
// gdn_intra_warp.cuh's pair routines), which halves the chain.
//
// Bytes: the arithmetic is that of gdn_intra.cuh's block routines, element by element: every Gram tile is the same
// sequence of mma over K ascending (GramMma), every kkt entry is kkt_entry, every diagonal column is
// solve_diagonal_column, the level-16 merges are merge16_tc, and each level-32 tile takes the same fragments and mma
// in the same order as merge32_tc's warp for it. Only the warp that executes an element's chain differs, so the output
// is byte for byte that of kkt_pipelined_kernel and of kkt + solve_tril (tests: GdnIntraWarp.*,
// GdnIntra.FusedBitIdenticalToUnfused, which takes this kernel on every fourth configuration, and
// GdnLargeGrid.MoreThan2Pow31Elements).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include "cuda/gdn_intra_warp.cuh"
#include "cuda/gdn_intra_warp.h"
#include "cuda/launch.h"
#include "cuda/tensor_map.h"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {

namespace {
gdn::warp_unit::TestingHooks kkt_warp_hooks;
gdn::warp_unit::TestingHooks kkt_pair_hooks;
}  // namespace
void set_kkt_warp_for_testing(KktWarpForTesting mode) { kkt_warp_hooks.set(mode); }
int64_t kkt_warp_launches_for_testing() { return kkt_warp_hooks.count_so_far(); }
void set_kkt_pair_for_testing(KktWarpForTesting mode) { kkt_pair_hooks.set(mode); }
int64_t kkt_pair_launches_for_testing() { return kkt_pair_hooks.count_so_far(); }

namespace gdn {
namespace {

using namespace warp_unit;

/// k [B, T, H, K] and the output [B, T, HV, 64] as 4-D tensor maps (gdn_rows_map: boxes of 64 columns x one head x
/// 64 rows).
struct KktMaps {
  CUtensorMap k, out;
};

/// Hints the L2 to fetch what unit `ch` / (hk, hv) will load: its k rows (the tensor map's boxes, by lane 0) and its
/// g / beta elements. By the whole warp; a hint, no value depends on it.
__device__ __forceinline__ void prefetch_unit(const KktArgs& a, const CUtensorMap* kmap, int kboxes, const ChunkRef& ch,
                                              int64_t hk, int64_t hv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane == 0) {
    for (int box = 0; box < kboxes; ++box) {
      tma_prefetch_4d(kmap, 64 * box, static_cast<int>(hk), static_cast<int>(ch.t0), static_cast<int>(ch.batch));
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = lane + 32 * j;
    if (i >= ch.len) break;
    const int64_t t = ch.t0 + i;
    if (a.g.data) {
      const float* g =
          static_cast<const float*>(a.g.data) + ch.batch * a.g.stride_b + t * a.g.stride_t + hv * a.g.stride_h;
      prefetch_l2(g);
    }
    if (a.beta.data) {
      const int64_t bytes = a.beta.dtype == DType::f32 ? 4 : 2;
      const char* b = static_cast<const char*>(a.beta.data) +
                      bytes * (ch.batch * a.beta.stride_b + t * a.beta.stride_t + hv * a.beta.stride_h);
      prefetch_l2(b);
    }
  }
#else
  (void)a, (void)kmap, (void)kboxes, (void)ch, (void)hk, (void)hv;  // the kernel runs on sm_90+ only
#endif
}

/// Unit u = (chunk slot u / HV, value head u % HV): the warps of the grid walk the units (consecutive warps take the
/// value heads of one chunk, which share k rows through the L2). Once a unit's Gram is in registers, the warp looks up
/// its next unit's chunk and (prm.prefetch) hints the L2 to fetch that unit's rows, so the next copies wait less.
template <typename TK, typename TO>
__global__ void __launch_bounds__(kMaxWarps * 32, kBlocksPerSm)
    kkt_solve_warp_kernel(const KktArgs args, const GdnOut out, const WarpKktParams prm,
                          const __grid_constant__ KktMaps maps) {
  pdl_wait_and_release();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // (no static shared memory: the dynamic shared memory starts 1024-byte aligned, as the 128-byte swizzle needs)
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const UnitRegion<TK> r(smem_raw, kMaxWarps, warp);
  if (lane == 0) {
    mbar_init(r.bar, 1);
    mbar_init_fence();
  }
  __syncwarp();
  uint32_t parity = 0;
  const int64_t HV = args.geo.HV, units = prm.slots * HV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kMaxWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kMaxWarps + warp;
  if (u >= units) return;
  const int64_t slot0 = u / HV;
  int64_t hv = u - slot0 * HV;
  ChunkRef ch = resolve_chunk<kBT>(args.geo, slot0, prm.errors, hv == 0);
  for (;;) {
    const int64_t un = u + stride;  // the next unit
    const int64_t slot_n = un / HV, hv_n = un - slot_n * HV;
    if (ch.len > 0) {  // warp-uniform
      bulk_wait_read();            // the previous unit's tensor-map store has read the region
      fence_proxy_async_shared();  // the previous unit's generic accesses of the region, before the copies
      __syncwarp();
      issue_tile(r.region, &maps.k, prm.kboxes, ch, hv / prm.group, r.bar);
      float gb[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) gb[j] = load_gate_or_beta<kBT>(args, ch, hv, lane + 32 * j);
#pragma unroll
      for (int j = 0; j < 4; ++j) r.gate_beta[lane + 32 * j] = gb[j];
      land_tile(r.region, prm.kboxes, ch.len, r.bar, parity, lane, 32);
      __syncwarp();
      GramWarp<TK> gram;
      gram.compute(r.ks, SwizzledRows{}, prm.kp);
      __syncwarp();  // every lane's k-tile reads are done: the A tile takes its bytes
      const ChunkRef next =
          un < units ? resolve_chunk<kBT>(args.geo, slot_n, prm.errors, hv_n == 0) : ChunkRef{0, 0, 0};
      if (prm.prefetch && next.len > 0)
        prefetch_unit(args, &maps.k, prm.kboxes, next, hv_n / prm.group, hv_n);
      gram.kkt_tile(r.gate_beta, ch.len, r.tile);
      __syncwarp();
      invert_unit_lower_warp(r.tile, ch.len);
      inverse_to_box<TO, 32>(r.tile, [] { __syncwarp(); });
      store_box_rows<TO>(r.region, &maps.out, out, 1, kBT, ch, hv, args.geo.T);
      __syncwarp();  // the lanes' reads of the box are done before the next unit's copies
      ch = next;
    } else {
      ch = un < units ? resolve_chunk<kBT>(args.geo, slot_n, prm.errors, hv_n == 0) : ChunkRef{0, 0, 0};
    }
    if (un >= units) break;
    u = un;
    hv = hv_n;
  }
  bulk_wait();  // the block's shared memory outlives its tensor-map stores
}

/// Blocks (pairs) per SM the pair kernel is built for: 18 warps.
constexpr int kPairBlocksPerSm = 9;

/// Pair-per-unit form: the two warps of a block take one unit together (gdn_intra_warp.cuh's pair routines: warp H
/// the Gram tiles, diagonal blocks, level-16 merge and level-32 row block of its PairRows), meeting at pair_sync; lane
/// 0 of warp 0 issues the k tile's tensor-map copies, then both warps load g / beta. Block b takes units b, b +
/// gridDim.x, ... (unit u as in kkt_solve_warp_kernel). Same bytes as the warp kernel. Why: where the units are few
/// per SM, the warp kernel's time is one warp's chain; here each chain is about half as long and an SM runs twice the
/// warps.
template <typename TK, typename TO>
__global__ void __launch_bounds__(64, kPairBlocksPerSm)
    kkt_solve_pair_kernel(const KktArgs args, const GdnOut out, const WarpKktParams prm,
                          const __grid_constant__ KktMaps maps) {
  pdl_wait_and_release();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // (no static shared memory: the dynamic shared memory starts 1024-byte aligned, as the 128-byte swizzle needs)
  const int half = static_cast<int>(threadIdx.x / 32), t = static_cast<int>(threadIdx.x);
  const UnitRegion<TK> r(smem_raw, 1, 0);
  if (t == 0) {
    mbar_init(r.bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  uint32_t parity = 0;
  const int64_t HV = args.geo.HV, units = prm.slots * HV;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t slot = u / HV;
    const int64_t hv = u - slot * HV;
    const ChunkRef ch = resolve_chunk<kBT>(args.geo, slot, prm.errors, hv == 0 && half == 0);
    if (ch.len == 0) continue;  // uniform over the pair
    if (t == 0) bulk_wait_read();  // the previous unit's tensor-map store has read the region
    fence_proxy_async_shared();    // the previous unit's generic accesses of the region, before the copies
    pair_sync();
    if (half == 0) issue_tile(r.region, &maps.k, prm.kboxes, ch, hv / prm.group, r.bar);
    float gb[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) gb[j] = load_gate_or_beta<kBT>(args, ch, hv, t + 64 * j);
#pragma unroll
    for (int j = 0; j < 2; ++j) r.gate_beta[t + 64 * j] = gb[j];
    land_tile(r.region, prm.kboxes, ch.len, r.bar, parity, t, 64);
    pair_sync();  // g / beta, and the zeros past the chunk
    if (half == 0) {
      gram_entries_pair<TK, 0>(r.region, SwizzledRows{}, prm.kp, r.gate_beta, ch.len);
    } else {
      gram_entries_pair<TK, 1>(r.region, SwizzledRows{}, prm.kp, r.gate_beta, ch.len);
      const int64_t un = u + gridDim.x;  // the block's next unit: warp 1 hints its rows to the L2 (prm.prefetch)
      if (prm.prefetch && un < units) {
        const int64_t slot_n = un / HV, hv_n = un - slot_n * HV;
        const ChunkRef next = resolve_chunk<kBT>(args.geo, slot_n, prm.errors, false);
        if (next.len > 0) prefetch_unit(args, &maps.k, prm.kboxes, next, hv_n / prm.group, hv_n);
      }
    }
    pair_sync();  // every entry is in the tile
    if (half == 0) {
      invert_unit_lower_pair<0>(r.tile, ch.len);
    } else {
      invert_unit_lower_pair<1>(r.tile, ch.len);
    }
    pair_sync();  // the inverse
    inverse_to_box<TO, 64>(r.tile, [] { pair_sync(); });
    store_box_rows<TO, 64>(r.region, &maps.out, out, 1, kBT, ch, hv, args.geo.T);
  }
  bulk_wait();  // the block's shared memory outlives its tensor-map stores
}

/// Units per SM up to which a warp-kernel grid takes the pair kernel. Measured on an H100 (132 SMs; bench/results/
/// h200/gdn.md, forty-sixth session): 0.889x the warp kernel's time at 512 units (3.9 per SM), 0.899x at 1024 (7.8),
/// 1.14x at 2048 (15.5), 0.99-1.01x on the larger grids. With few units per SM the warp kernel's time is one warp's
/// chain; the pair halves it. With many, an SM holds 9 pairs (18 warps) against 12 warps, and the pair barriers cost.
/// By this rule (forty-seventh session, H100): 0.889x and 0.895x at 512 and 1024 units, 0.998-1.006x elsewhere.
constexpr int64_t kPairUnitsPerSm = 8;

/// Whether a grid of `units` that takes the warp form runs its pair kernel: the testing hook's mode, else at most
/// kPairUnitsPerSm units per SM and not FUSEOPS_GDN_KKT_PAIR=0 (A/B runs; the same bytes either way).
bool kkt_pair_takes(int64_t units, int device) {
  const KktWarpForTesting hook = kkt_pair_hooks.get();
  if (hook != KktWarpForTesting::rule) return hook == KktWarpForTesting::always;
  static const bool off = env_switched_off("FUSEOPS_GDN_KKT_PAIR");
  return !off && units <= kPairUnitsPerSm * sm_count(device);
}

template <typename TK, typename TO>
void launch_as(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, const KktMaps& maps,
               int device, cudaStream_t stream) {
  const auto kernel = kkt_solve_warp_kernel<TK, TO>;
  constexpr std::size_t smem = kMaxWarps * kWarpBytes;
  const int64_t units = prm.slots * a.geo.HV;
  static const bool hints_off = env_switched_off("FUSEOPS_GDN_KKT_WARP_PREFETCH");
  if (kkt_pair_takes(units, device)) {
    const auto pair_kernel = kkt_solve_pair_kernel<TK, TO>;
    const int64_t pairs = cached_wave(pair_kernel, 64, kWarpBytes, device, op);
    kkt_pair_hooks.count();
    // the warp kernel's rule for the hints, per block: at most two units each (the testing mode `always`: every grid)
    WarpKktParams p = prm;
    p.prefetch = !hints_off && (units <= 2 * pairs || kkt_pair_hooks.get() == KktWarpForTesting::always);
    launch_kernel(pair_kernel, dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(units, pairs)))), dim3(64),
                  kWarpBytes, stream, device, a, out, p, maps);
    return;
  }
  const int64_t wave = cached_wave(kernel, kMaxWarps * 32, smem, device, op);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((units + kMaxWarps - 1) / kMaxWarps, wave));
  // The L2 hints pay where a warp has at most two units (its second load is then not hidden behind other warps'
  // work); with more they were slower (bench/results/h200/gdn.md, thirty-third session).
  // (The testing mode `always` takes them on every grid, so that tests reach them whatever the GPU's size.)
  // FUSEOPS_GDN_KKT_WARP_PREFETCH=0 switches them off (A/B runs; no value depends on them).
  WarpKktParams p = prm;
  p.prefetch = !hints_off && (units <= 2 * wave * kMaxWarps || kkt_warp_hooks.get() == KktWarpForTesting::always);
  launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMaxWarps * 32), smem, stream, device, a, out, p,
                maps);
}

template <typename TK>
void launch_k(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, const KktMaps& maps,
              int device, cudaStream_t stream) {
  if (out.dtype == DType::f16) {
    launch_as<TK, __half>(op, a, out, prm, maps, device, stream);
  } else {
    launch_as<TK, __nv_bfloat16>(op, a, out, prm, maps, device, stream);
  }
}

}  // namespace

bool kkt_solve_warp_applies(const KktArgs& a, const GdnOut& out, int64_t kp, bool k_vec, int device, bool one_wave) {
  static const bool off = env_switched_off("FUSEOPS_GDN_KKT_WARP");
  const KktWarpForTesting mode = kkt_warp_hooks.get();
  const bool pair_forced = kkt_pair_hooks.get() == KktWarpForTesting::always;
  if (mode == KktWarpForTesting::never ||
      (mode == KktWarpForTesting::rule && !pair_forced && (off || one_wave)))
    return false;
  if (!is_sm90_or_newer(device)) return false;  // tensor-map copies and mbarriers
  const bool k16 = a.k.dtype == DType::f16 || a.k.dtype == DType::bf16;
  const bool o16 = out.dtype == DType::f16 || out.dtype == DType::bf16;
  return a.geo.BT == kBT && k16 && o16 && kp <= 128 && k_vec && reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0;
}

bool launch_kkt_solve_warp(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, int device,
                           void* stream) {
  KktMaps maps;
  if (a.geo.T > INT32_MAX || a.geo.B > INT32_MAX || !gdn_rows_map(&maps.k, a.k, a.k.dtype, a.geo.K, a.geo.H, a.geo) ||
      !gdn_rows_map(&maps.out, as_in(out), out.dtype, kBT, a.geo.HV, a.geo))
    return false;
  const auto s = static_cast<cudaStream_t>(stream);
  kkt_warp_hooks.count();
  if (a.k.dtype == DType::f16) {
    launch_k<__half>(op, a, out, prm, maps, device, s);
  } else {
    launch_k<__nv_bfloat16>(op, a, out, prm, maps, device, s);
  }
  return true;
}

}  // namespace gdn
}  // namespace fuseops::detail::cuda
