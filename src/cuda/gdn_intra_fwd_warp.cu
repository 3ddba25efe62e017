// Warp-per-unit form of the forward's intra-chunk kernel (chunk 64, f16 / bf16 k and v with K, V <= 128 in 16-byte
// rows): one warp takes one (chunk, value head) from its k rows to the stored w and u rows, with no block barrier.
//
// Why: the block kernel (gdn_intra_fwd.cu) spreads a (chunk, key head) over 8 warps that meet at five to seven block
// barriers per value head, and runs its diagonal blocks and level-16 merges on 2 of the 8 (~13k warp instructions per
// unit at 16 / 32 heads, bench/results/h200/gdn.md). As in the fused kkt + inverse's warp kernel (gdn_intra_warp.cu),
// each warp here runs the whole chain alone, and many independent warps per SM (12, 17.9 KB of shared memory each)
// hide each other's latencies.
//
// Per unit, in the warp's one tile region: the k rows by tensor-map copies; the Gram in registers; the kkt and
// inverse in fp32 in the same bytes (gdn_intra_warp.cuh); the two A operands of w and u (scale_inverse_columns'
// values) taken into registers as mma fragments; then the v rows into the region, u = Au v in place, u's rows out by
// tensor-map stores (by the lanes for a partial chunk inside a batch); then the k rows again (from the L2), w = Aw k in
// place, w's rows out. The k rows are read twice per unit: keeping
// them beside the A tile would halve the warps per SM.
//
// Bytes: every product is lower_times' (gdn_wu.cuh): each 16 x 8 output tile sums the k blocks 0 .. its row block in
// ascending order with the same mma and the same operand values, rounded once to the input dtype; the operands are
// scale_inverse_columns' (the inverse rounded to the input dtype, times beta e^g or beta, rounded once), and the
// inverse is the block routines' (gdn_intra_warp.cuh). So w and u, and the forward's o and final state, are byte for
// byte those of the block kernel and of kkt_solve + recompute_w_u_fwd (tests: GdnIntraFwdWarp.*). k is read through
// WuArgs::k, as the block kernel reads it; KktArgs gives the geometry, g and beta.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_intra_fwd_warp.h"
#include "cuda/gdn_intra_warp.cuh"
#include "cuda/launch.h"
#include "cuda/tensor_map.h"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {

namespace {
gdn::warp_unit::TestingHooks intra_warp_hooks;
}  // namespace
void set_intra_warp_for_testing(KktWarpForTesting mode) { intra_warp_hooks.set(mode); }
int64_t intra_warp_launches_for_testing() { return intra_warp_hooks.count_so_far(); }

namespace gdn {
namespace {

using namespace warp_unit;

/// Index of the A fragment of row block rb and k block s <= rb (the blocks on and below the diagonal, row by row).
__host__ __device__ constexpr int frag(int rb, int s) { return rb * (rb + 1) / 2 + s; }

/// The A operands of w and u as mma.m16n8k16 A fragments of the 10 blocks on and below the diagonal: the values
/// scale_inverse_columns gives (a_ij rounded to TK, times sw_j or sb_j for j <= i, 0 above, rounded to TK), read from
/// the fp32 inverse `tile` (row stride kLd). Fragment registers: (row qr, columns qc, qc + 1), (qr + 8, qc ..),
/// (qr, qc + 8 ..), (qr + 8, qc + 8 ..) of the block, qr = lane / 4, qc = 2 (lane % 4), as ldmatrix_x4 gives them.
template <typename TK>
struct InverseFragments {
  uint32_t w[10][4], u[10][4];

  __device__ void load(const float* tile, const float* sw, const float* sb) {
    const int lane = static_cast<int>(threadIdx.x % 32), qr = lane / 4, qc = 2 * (lane % 4);
#pragma unroll
    for (int rb = 0; rb < 4; ++rb) {
#pragma unroll
      for (int s = 0; s <= rb; ++s) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const int i = 16 * rb + qr + 8 * (h & 1), j = 16 * s + qc + 8 * (h >> 1);
          const float2 x = *reinterpret_cast<const float2*>(tile + i * kLd + j);
          const float f0 = to_float(from_float<TK>(x.x)), f1 = to_float(from_float<TK>(x.y));
          const bool l0 = j <= i, l1 = j + 1 <= i;  // a select, as scale_inverse_columns (always true for s < rb)
          w[frag(rb, s)][h] = pack2<TK>(l0 ? f0 * sw[j] : 0.f, l1 ? f1 * sw[j + 1] : 0.f);
          u[frag(rb, s)][h] = pack2<TK>(l0 ? f0 * sb[j] : 0.f, l1 ? f1 * sb[j + 1] : 0.f);
        }
      }
    }
  }
};

/// X := A X for the rows of the first NRB row blocks, in place, in column blocks of 16 (cp columns, a multiple of 16):
/// X is a row tile in the tensor maps' layout (SwizzledRows) whose rows [0, 64) are finite, A is given by its
/// fragments. Each 16 x 8 output tile sums k blocks 0 .. its row block in ascending order, as lower_item; a column
/// block's results replace its columns once every lane has read them.
template <typename TK, int NRB>
__device__ __forceinline__ void lower_times_blocks(const uint32_t (&A)[10][4], unsigned char* X, int cp) {
  const int lane = static_cast<int>(threadIdx.x % 32), qr = lane / 4, qc = 2 * (lane % 4), rr = lane % 8;
  const SwizzledRows lay;
  const unsigned char* const b_row = X + lay.row((lane & 7) + ((lane >> 3) & 1) * 8);  // rows rr modulo 8
  unsigned char* const o_row = X + lay.row(qr);                                        // rows qr modulo 8
#pragma unroll 1
  for (int n0 = 0; n0 < cp; n0 += 16) {
    const unsigned char* const b_ptr = b_row + lay.col(rr, n0 + (lane >> 4) * 8);
    uint32_t b[NRB][4];
#pragma unroll
    for (int s = 0; s < NRB; ++s) ldmatrix_x4_trans(b[s], b_ptr + lay.row(16 * s));
    float acc[NRB][2][4] = {};
#pragma unroll
    for (int s = 0; s < NRB; ++s) {
#pragma unroll
      for (int rb = s; rb < NRB; ++rb) {
        mma_m16n8k16<TK>(acc[rb][0], A[frag(rb, s)], b[s][0], b[s][1]);
        mma_m16n8k16<TK>(acc[rb][1], A[frag(rb, s)], b[s][2], b[s][3]);
      }
    }
    __syncwarp();  // every lane has read these columns
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      unsigned char* const o = o_row + lay.col(qr, n0 + 8 * t + qc);
#pragma unroll
      for (int rb = 0; rb < NRB; ++rb) {
        *reinterpret_cast<uint32_t*>(o + lay.row(16 * rb)) = pack2<TK>(acc[rb][t][0], acc[rb][t][1]);
        *reinterpret_cast<uint32_t*>(o + lay.row(16 * rb + 8)) = pack2<TK>(acc[rb][t][2], acc[rb][t][3]);
      }
    }
  }
}

/// lower_times_blocks over the row blocks that hold the chunk's rows (len > 0): the blocks at or past len are
/// skipped, as lower_times skips them; rows in [len, 16 ceil(len / 16)) take values that are never stored.
template <typename TK>
__device__ void lower_times_in_place(const uint32_t (&A)[10][4], unsigned char* X, int cp, int len) {
  switch ((len + 15) / 16) {  // warp-uniform
    case 4:
      lower_times_blocks<TK, 4>(A, X, cp);
      break;
    case 3:
      lower_times_blocks<TK, 3>(A, X, cp);
      break;
    case 2:
      lower_times_blocks<TK, 2>(A, X, cp);
      break;
    default:
      lower_times_blocks<TK, 1>(A, X, cp);
      break;
  }
}

/// The four tensors of the kernel as 4-D tensor maps (gdn_rows_map: boxes of 64 columns x one head x 64 rows).
struct IntraMaps {
  CUtensorMap k, v, w, u;
};

/// Unit u = (chunk slot u / HV, value head u % HV); the warps of the grid walk the units (consecutive warps take the
/// value heads of one chunk, which share k rows through the L2). Warps per block: blockDim.x / 32. Shared memory:
/// the warps' tile regions (1024-byte aligned for the 128-byte swizzle), then their g / beta rows, then their
/// mbarriers.
template <typename TK>
__global__ void __launch_bounds__(kMaxWarps * 32, kBlocksPerSm)
    intra_fwd_warp_kernel(const KktArgs ka, const WuArgs a, const WarpIntraParams prm,
                          const __grid_constant__ IntraMaps maps) {
  pdl_wait();  // its dependents are released at its end (below)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // (no static shared memory: the dynamic shared memory starts 1024-byte aligned, as the 128-byte swizzle needs)
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const UnitRegion<TK> r(smem_raw, warps, warp);
  unsigned char* const x = r.region;  // k rows, v rows, u / w rows (SwizzledRows)
  float* const tile = r.tile;         // the A tile, in the same bytes
  float* const gate_beta = r.gate_beta;
  uint64_t* const bar = r.bar;
  if (lane == 0) {
    mbar_init(bar, 1);
    mbar_init_fence();
  }
  __syncwarp();
  uint32_t parity = 0;
  const int K = static_cast<int>(ka.geo.K), V = static_cast<int>(a.V);
  const int kboxes = (K + 63) / 64, vboxes = (V + 63) / 64;
  const int64_t HV = ka.geo.HV, units = prm.slots * HV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  // the next copy into the region waits for the warp's earlier accesses: generic ones fenced to the async proxy,
  // the bulk stores' reads of it complete
  auto region_free = [&] {
    bulk_wait_read();
    fence_proxy_async_shared();
    __syncwarp();
  };
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * warps + warp; u < units; u += stride) {
    const int64_t slot = u / HV;
    const int64_t hv = u - slot * HV;
    const ChunkRef ch = resolve_chunk<kBT>(ka.geo, slot, prm.errors, hv == 0);
    if (ch.len == 0) continue;  // warp-uniform
    const int64_t hk = hv / prm.group;
    const int len = ch.len;
    region_free();
    float gb[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) gb[j] = load_gate_or_beta<kBT>(ka, ch, hv, lane + 32 * j);
    load_tile(x, &maps.k, kboxes, ch, hk, bar, parity);
#pragma unroll
    for (int j = 0; j < 4; ++j) gate_beta[lane + 32 * j] = gb[j];
    {
      GramWarp<TK> gram;
      gram.compute(reinterpret_cast<const TK*>(x), SwizzledRows{}, prm.kp);
      __syncwarp();  // every lane's k-tile reads (and g / beta writes) are done: the A tile takes the bytes
      gram.kkt_tile(gate_beta, len, tile);
    }
    __syncwarp();
    invert_unit_lower_warp(tile, len);
    // the inverse's column factors, as the block kernel's colscale: g := beta e^g (rows past the chunk: 0 and 1 -> 1)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = lane + 32 * j;
      gate_beta[c] = gate_beta[kBT + c] * expf(gate_beta[c]);
    }
    __syncwarp();
    InverseFragments<TK> fr;
    fr.load(tile, gate_beta, gate_beta + kBT);
    region_free();  // the tile is read
    load_tile(x, &maps.v, vboxes, ch, hv, bar, parity);
    lower_times_in_place<TK>(fr.u, x, prm.vp, len);
    __syncwarp();
    store_box_rows<TK, 32, /*kFence=*/true>(x, &maps.u, a.u, vboxes, V, ch, hv, ka.geo.T);
    region_free();
    load_tile(x, &maps.k, kboxes, ch, hk, bar, parity);
    lower_times_in_place<TK>(fr.w, x, prm.kp, len);
    __syncwarp();
    store_box_rows<TK, 32, /*kFence=*/true>(x, &maps.w, a.w, kboxes, K, ch, hv, ka.geo.T);
  }
  // The next kernel (fwd_h) launches once each block has a warp done here (the first thread to release counts for
  // its block), not at this kernel's start: launched early, its blocks wait on the SMs this grid's tail frees first,
  // and the forward measured 1.005-1.16x slower (the most on the smallest grids of this kernel;
  // bench/results/h200/gdn.md, thirty-fifth session). fwd_h's wait for this grid's completion and its memory is the
  // same either way.
  pdl_release();
  bulk_wait();  // the block's shared memory outlives its copies
}

/// Block shape of a grid of one unit per warp (units <= kMaxWarps kBlocksPerSm per SM): `warps` per block and at most
/// `per_sm` blocks on an SM, held there by `smem` (shared memory padded past what per_sm + 1 blocks could take), so
/// that no SM runs more units than the even spread needs. Each SM's units run side by side, their chains all as long,
/// and the kernel lasts as long as its busiest SM: at 2/8 [8 x 1024] (1088 units) blocks of 4 warps put 12 warps on
/// some SMs and 8 on most; blocks of 3, at most 3 per SM, put 9 (ncu: the kernel 31.0 -> 26.8 us, the forward 0.986x;
/// one warp per block, 9 at most: 28.3 us, 1.015x). Among 4, 3, 2 warps per block, the one whose busiest SM takes the
/// fewest warps, the widest on a tie (one warp per block only where the spread is one per SM). Grids of more units:
/// kMaxWarps per block, kBlocksPerSm per SM. `sm_smem`, `reserved`: an SM's shared memory and what each block takes of
/// it besides its own (cudaDevAttrMaxSharedMemoryPerMultiprocessor, cudaDevAttrReservedSharedMemoryPerBlock).
IntraWarpGrid warp_grid(int64_t units, int64_t sms, std::size_t sm_smem, std::size_t reserved) {
  const int64_t per_sm = (units + sms - 1) / sms;  // warps the even spread puts on an SM
  if (per_sm >= int64_t{kMaxWarps} * kBlocksPerSm) return {kMaxWarps, kMaxWarps * kWarpBytes};
  int best_w = 1;
  int64_t best = 1;
  if (per_sm > 1) {
    best_w = kMaxWarps;
    best = kMaxWarps * ((per_sm + kMaxWarps - 1) / kMaxWarps);
    for (int w = kMaxWarps - 1; w >= 2; --w) {
      const int64_t busiest = w * ((per_sm + w - 1) / w);
      if (busiest < best) best = busiest, best_w = w;
    }
  }
  const int64_t blocks_per_sm = best / best_w;
  // an SM's shared memory takes blocks_per_sm blocks of this size, not one more
  const std::size_t share = sm_smem / static_cast<std::size_t>(blocks_per_sm + 1) + 16;
  const std::size_t cap = share > reserved ? share - reserved : 0;
  return {best_w, std::max(static_cast<std::size_t>(best_w) * kWarpBytes, cap)};
}

/// The mode: the testing hook's where it is set, else FUSEOPS_GDN_INTRA_WARP: `0` never, `always` always (the
/// measurement switch of the launch rule), unset (or any other value) the rule.
KktWarpForTesting intra_warp_mode() {
  const KktWarpForTesting hook = intra_warp_hooks.get();
  if (hook != KktWarpForTesting::rule) return hook;
  static const KktWarpForTesting by_env = [] {
    if (env_switched_off("FUSEOPS_GDN_INTRA_WARP")) return KktWarpForTesting::never;
    const char* v = std::getenv("FUSEOPS_GDN_INTRA_WARP");
    return v != nullptr && std::strcmp(v, "always") == 0 ? KktWarpForTesting::always : KktWarpForTesting::rule;
  }();
  return by_env;
}

/// The four tensor maps, or false where T or B is past 32 bits (the maps' coordinates), a view is broadcast, or the
/// driver refuses a map.
bool make_maps(IntraMaps& maps, const KktArgs& ka, const WuArgs& a) {
  if (ka.geo.T > INT32_MAX || ka.geo.B > INT32_MAX) return false;
  const DType dt = a.k.dtype;
  return gdn_rows_map(&maps.k, a.k, dt, a.geo.K, a.geo.H, a.geo) &&
         gdn_rows_map(&maps.v, a.v, dt, a.V, a.geo.HV, a.geo) &&
         gdn_rows_map(&maps.w, as_in(a.w), dt, a.geo.K, a.geo.HV, a.geo) &&
         gdn_rows_map(&maps.u, as_in(a.u), dt, a.V, a.geo.HV, a.geo);
}

/// The launch, or false (nothing launched) where the rule keeps the block kernel: at most four units per SM (one per
/// warp scheduler, where nothing hides a unit's warp chain, longer than the block kernel's 8-warp one: 0.99-1.18x the
/// forward's time at 256-512 units, 0.90-0.93x at 768-1024; bench/results/h200/gdn.md, thirty-fifth session), unless
/// the mode is `always`; or where a tensor has no map, or T or B is past 32 bits.
template <typename TK>
bool launch_as(const char* op, const KktArgs& ka, const WuArgs& a, const WarpIntraParams& prm, int device,
               cudaStream_t stream) {
  const auto kernel = intra_fwd_warp_kernel<TK>;
  const int64_t units = prm.slots * ka.geo.HV;
  const int64_t sms = sm_count(device);
  if (intra_warp_mode() != KktWarpForTesting::always && units <= 4 * sms) return false;
  IntraMaps maps;
  if (!make_maps(maps, ka, a)) return false;
  const auto sm_smem = static_cast<std::size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const auto reserved = static_cast<std::size_t>(device_attribute(cudaDevAttrReservedSharedMemoryPerBlock, device));
  const IntraWarpGrid wg = warp_grid(units, sms, sm_smem, reserved);
  const int warps = wg.warps;
  const std::size_t smem = wg.smem;
  const int64_t wave = cached_wave(kernel, warps * 32, smem, device, op);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((units + warps - 1) / warps, wave));
  intra_warp_hooks.count();
  launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(warps * 32), smem, stream, device, ka, a, prm, maps);
  return true;
}

}  // namespace

}  // namespace gdn

IntraWarpGrid intra_warp_grid_for_testing(int64_t units, int64_t sms, std::size_t sm_smem, std::size_t reserved) {
  return gdn::warp_grid(units, sms, sm_smem, reserved);
}

namespace gdn {

bool intra_fwd_warp_applies(const KktArgs& ka, const WuArgs& a, int device) {
  if (intra_warp_mode() == KktWarpForTesting::never) return false;
  if (a.ready != nullptr || a.geo.BT != kBT || !is_sm90_or_newer(device)) return false;
  const DType dt = a.k.dtype;
  if ((dt != DType::f16 && dt != DType::bf16) || a.v.dtype != dt || a.w.dtype != dt || a.u.dtype != dt) return false;
  return a.geo.K <= 128 && a.V <= 128 && rows_16b(a.k, a.geo.K) && rows_16b(a.v, a.V) && rows_16b(a.w, a.geo.K) &&
         rows_16b(a.u, a.V);
}

namespace {

/// The kernel's launch-time constants of `a`.
WarpIntraParams warp_params(const WuArgs& a, int device) {
  WarpIntraParams prm{};
  prm.slots = chunk_slots(a.geo);
  prm.group = static_cast<int>(a.geo.HV / a.geo.H);
  prm.kp = static_cast<int>((a.geo.K + 15) / 16 * 16);
  prm.vp = static_cast<int>((a.V + 15) / 16 * 16);
  prm.errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  return prm;
}

}  // namespace

bool launch_intra_fwd_warp(const char* op, const KktArgs& ka, const WuArgs& a, int device, void* stream) {
  const WarpIntraParams prm = warp_params(a, device);
  const auto s = static_cast<cudaStream_t>(stream);
  return a.k.dtype == DType::f16 ? launch_as<__half>(op, ka, a, prm, device, s)
                                 : launch_as<__nv_bfloat16>(op, ka, a, prm, device, s);
}

}  // namespace gdn
}  // namespace fuseops::detail::cuda
