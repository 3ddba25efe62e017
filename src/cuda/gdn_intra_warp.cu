// Warp-per-unit form of the fused chunk_gated_delta_rule_fwd_kkt_solve (chunk 64, f16 / bf16 k with K <= 128, f16 /
// bf16 output): one warp takes one (chunk, value head) from its k rows to the stored inverse, with no block barrier.
//
// Why: the block kernels (gdn_intra.cu) spread a unit over 8 warps that meet at block barriers, and most of their
// steps (the diagonal blocks, the level-16 merges) run on 2 of the 8; their profile is issue- and barrier-bound (~10k
// warp instructions per unit, docs/ops/gdn.md "Performance"). Here each warp runs the whole chain alone, and the
// A fragments that the 8 warps of a block merge each loaded again are loaded once. Many independent warps per SM (12:
// 17.9 KB of shared memory each) hide each other's latencies.
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
#include <cstdint>

#include "cuda/bulk_copy.cuh"
#include "cuda/gdn_intra.cuh"
#include "cuda/gdn_intra_warp.h"
#include "cuda/launch.h"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {

std::atomic<KktWarpForTesting> kkt_warp_mode{KktWarpForTesting::rule};
void set_kkt_warp_for_testing(KktWarpForTesting mode) { kkt_warp_mode.store(mode, std::memory_order_relaxed); }
std::atomic<int64_t> kkt_warp_launches{0};
int64_t kkt_warp_launches_for_testing() { return kkt_warp_launches.load(std::memory_order_relaxed); }

namespace gdn {
namespace {

constexpr int kBT = 64;
constexpr int kLd = kTileLd<kBT>;
constexpr int kUnitWarps = 4;   ///< warps per block (each on its own units)
constexpr int kUnitBlocks = 3;  ///< blocks per SM: 12 warps, 215 KB of shared memory
/// Per warp: one region for the k tile [64][kp + 8] (16-bit, kp <= 128), then the fp32 A tile [64][68] in the same
/// bytes (the k tile is dead once the Gram is in registers), then g / beta of the chunk's rows, then the mbarrier of
/// the k rows' bulk copies.
constexpr std::size_t kTileBytes = std::size_t{kBT} * kLd * sizeof(float);
static_assert(kTileBytes >= std::size_t{kBT} * (128 + 8) * 2, "the A tile's bytes hold a k tile of K <= 128");
constexpr std::size_t kGateBytes = 2 * kBT * sizeof(float);
constexpr std::size_t kWarpBytes = kTileBytes + kGateBytes + 16;

/// The chunk's k rows (key head hk) -> ks[64][ld]: one bulk copy of K elements per valid row, completing on `bar`
/// (this call posts the phase's byte count), and zeros by the lanes in rows past the chunk and in columns [K, kp) (K
/// is a multiple of 8, so that is at most one 16-byte piece per row). The region's earlier generic accesses must be
/// fenced to the async proxy and ordered by a warp barrier before the call.
template <typename TK>
__device__ void load_k_rows_bulk(TK* ks, int ld, int kp, const GdnIn& k, int K, const ChunkRef& ch, int64_t hk,
                                 uint64_t* bar) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const TK* src = static_cast<const TK*>(k.data) + ch.batch * k.stride_b + ch.t0 * k.stride_t + hk * k.stride_h;
  const uint32_t row_bytes = static_cast<uint32_t>(K) * sizeof(TK);
  if (lane == 0) mbar_arrive_expect(bar, static_cast<uint32_t>(ch.len) * row_bytes);
  __syncwarp();
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = lane + 32 * j;
    TK* d = ks + i * ld;
    if (i < ch.len) {
      bulk_load(smem_addr(d), src + i * k.stride_t, row_bytes, bar);
      if (K < kp) *reinterpret_cast<uint4*>(d + K) = zero;
    } else {
      for (int c = 0; c < kp; c += 16 / static_cast<int>(sizeof(TK))) *reinterpret_cast<uint4*>(d + c) = zero;
    }
  }
}

/// The Gram tiles of one chunk that hold entries below the diagonal, all in one warp: row block rb (16 rows) has
/// column tiles ct = 0 .. 2 rb + 1 (8 columns), tile index rb (rb + 1) + ct: 20 tiles, 80 accumulators per lane. Each
/// tile is GramMma's: A fragments of rows 16 rb.., B fragments of the 8 column tokens, mma over K ascending from 0.
template <typename TK>
struct GramWarp {
  static constexpr int kTiles = 20;
  float v[kTiles][4];

  /// ks: k tile [64][ld], kp (multiple of 16, <= 128) columns, zero past K and past the chunk.
  __device__ void compute(const TK* ks, int ld, int kp) {
    const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) v[t][0] = v[t][1] = v[t][2] = v[t][3] = 0.f;
    const TK* a_ptr = ks + (lane % 16) * ld + (lane / 16) * 8;
    const TK* b_ptr = ks + ((lane / 16) * 8 + lane % 8) * ld + ((lane / 8) & 1) * 8;
#pragma unroll 1
    for (int kk = 0; kk < kp; kk += 16) {  // ascending over K
      uint32_t b[8][2];
#pragma unroll
      for (int ct = 0; ct < 8; ct += 2) {
        uint32_t q[4];
        ldmatrix_x4(q, b_ptr + ct * 8 * ld + kk);
        b[ct][0] = q[0], b[ct][1] = q[1], b[ct + 1][0] = q[2], b[ct + 1][1] = q[3];
      }
#pragma unroll
      for (int rb = 0; rb < 4; ++rb) {
        uint32_t a[4];
        ldmatrix_x4(a, a_ptr + rb * 16 * ld + kk);
#pragma unroll
        for (int ct = 0; ct <= 2 * rb + 1; ++ct) mma_m16n8k16<TK>(v[rb * (rb + 1) + ct], a, b[ct][0], b[ct][1]);
      }
    }
  }

  /// The kkt entries of the 20 tiles -> tile (row stride kLd); gate_beta: g[0..64) then beta[0..64). Tiles past the
  /// chunk get kkt_entry's exact 0 (j >= len > i), as GramMma::kkt_tile writes for tiles it skips. The 16 x 16 blocks
  /// above the diagonal blocks are not written (the inverse never reads them; the store writes them as 0).
  __device__ void kkt_tile(const float* gate_beta, int len, float* tile) const {
    const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int rb = 0; rb < 4; ++rb) {
      const int row = 16 * rb + lane / 4;
      const float g0 = gate_beta[row], g1 = gate_beta[row + 8];
      const float b0 = gate_beta[kBT + row], b1 = gate_beta[kBT + row + 8];
#pragma unroll
      for (int ct = 0; ct <= 2 * rb + 1; ++ct) {
        const int c = 8 * ct + 2 * (lane % 4);
        const float(&d)[4] = v[rb * (rb + 1) + ct];
        const float gc0 = gate_beta[c], gc1 = gate_beta[c + 1];
        float* p = tile + row * kLd + c;
        *reinterpret_cast<float2*>(p) =
            make_float2(kkt_entry(d[0], row, c, len, g0, gc0, b0), kkt_entry(d[1], row, c + 1, len, g0, gc1, b0));
        *reinterpret_cast<float2*>(p + 8 * kLd) = make_float2(kkt_entry(d[2], row + 8, c, len, g1, gc0, b1),
                                                              kkt_entry(d[3], row + 8, c + 1, len, g1, gc1, b1));
      }
    }
  }
};

/// merge32_tc's level-32 merge by one warp: its 8 output tiles (rb, nt), each with merge32_tc's fragments and mma in
/// merge32_tc's order (P: k steps s = nt..3 ascending; X21: k 0 .. 16 rb + 15 ascending). The two row blocks run
/// interleaved, and a fragment that both (or all 4 column tiles) use is loaded once. pt: P^T (32 x 32, row stride
/// kLd). Both row blocks always run (merge32_tc skips a row block at or past len: rows never stored, read by no stored
/// row).
__device__ void merge32_warp(float* a, float* pt, int len) {
  if (32 >= len) return;  // warp-uniform
  {
    float d[2][4][4] = {};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int rb = 0; rb < 2; ++rb) load_a_split(a + (32 + 16 * rb) * kLd + 8 * s, kLd, ah[rb], al[rb]);
#pragma unroll
      for (int nt = 0; nt <= s; ++nt) {
        uint32_t bh[2], bl[2];
        load_b_split(a + (8 * s) * kLd + 8 * nt, kLd, bh, bl);
#pragma unroll
        for (int rb = 0; rb < 2; ++rb) mma_m16n8k8_split(d[rb][nt], ah[rb], al[rb], bh[0], bh[1], bl[0], bl[1]);
      }
    }
#pragma unroll
    for (int rb = 0; rb < 2; ++rb) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) store_transposed(pt + (8 * nt) * kLd + 16 * rb, kLd, d[rb][nt]);
    }
  }
  __syncwarp();  // P^T complete
  {
    float d[2][4][4] = {};
    uint32_t xh[3][2][4], xl[3][2][4];  // X22 fragments: (rb 0, s2 0), (rb 1, s2 0), (rb 1, s2 1); h = 0, 1
#pragma unroll
    for (int f = 0; f < 3; ++f) {
      const int rb = f == 0 ? 0 : 1, s2 = f == 2 ? 1 : 0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        load_a_split(a + (32 + 16 * rb) * kLd + 32 + 16 * s2 + 8 * h, kLd, xh[f][h], xl[f][h]);
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int s2 = 0; s2 < 2; ++s2) {
        uint32_t bh[4], bl[4];
        load_bt2_split(pt + (8 * nt) * kLd + 16 * s2, kLd, bh, bl);
#pragma unroll
        for (int rb = s2; rb < 2; ++rb) {
          const int f = rb + s2;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            mma_m16n8k8_split(d[rb][nt], xh[f][h], xl[f][h], bh[2 * h], bh[2 * h + 1], bl[2 * h], bl[2 * h + 1]);
          }
        }
      }
    }
#pragma unroll
    for (int rb = 0; rb < 2; ++rb) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) store_negated(a + (32 + 16 * rb) * kLd + 8 * nt, kLd, d[rb][nt]);
    }
  }
  __syncwarp();
}

/// invert_unit_lower<64, true> by one warp: rows [0, len) of tile := those of (I + tile)^{-1}, the same bytes.
/// Lane l solves column l % 16 of diagonal blocks l / 16 and l / 16 + 2 (always: a block past len only writes rows
/// that are never stored). The merges' P^T scratch lies in the tile's blocks above the diagonal blocks, which no step
/// reads: level 16 pair 0 in rows 0-15 / columns 16-31, pair 1 in rows 32-47 / columns 48-63, level 32 in rows 0-31 /
/// columns 32-63 (so the store must write those blocks as 0).
__device__ void invert_unit_lower_warp(float* a, int len) {
  const int lane = static_cast<int>(threadIdx.x % 32), c = lane % 16;
  float* blk0 = a + (lane / 16) * 16 * (kLd + 1);
  float* blk1 = blk0 + 32 * (kLd + 1);
  float x0[16], x1[16];
  solve_diagonal_column<kLd>(blk0, c, x0);
  solve_diagonal_column<kLd>(blk1, c, x1);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    blk0[i * kLd + c] = x0[i];
    blk1[i * kLd + c] = x1[i];
  }
  __syncwarp();
  float* const pt[2] = {a + 16, a + 32 * kLd + 48};
  merge16_tc<kBT, kLd, 2>(a, pt, len, 0, /*skip=*/false);
  __syncwarp();
  merge32_warp(a, a + 32, len);
}

/// Hints the L2 to fetch what unit `ch` / (hk, hv) will load: its k rows (kbytes each, 16-byte multiples at 16-byte
/// aligned rows) and its g / beta elements. By the whole warp; a hint, no value depends on it.
__device__ __forceinline__ void prefetch_unit(const KktArgs& a, const ChunkRef& ch, int64_t hk, int64_t hv,
                                              int kbytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = lane + 32 * j;
    if (i >= ch.len) break;
    const int64_t t = ch.t0 + i;
    const char* row =
        static_cast<const char*>(a.k.data) + 2 * (ch.batch * a.k.stride_b + t * a.k.stride_t + hk * a.k.stride_h);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(row)), "r"(kbytes)
                 : "memory");
    if (a.g.data) {
      const float* g =
          static_cast<const float*>(a.g.data) + ch.batch * a.g.stride_b + t * a.g.stride_t + hv * a.g.stride_h;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(g)));
    }
    if (a.beta.data) {
      const int64_t bytes = a.beta.dtype == DType::f32 ? 4 : 2;
      const char* b = static_cast<const char*>(a.beta.data) +
                      bytes * (ch.batch * a.beta.stride_b + t * a.beta.stride_t + hv * a.beta.stride_h);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(b)));
    }
  }
#else
  (void)a, (void)ch, (void)hk, (void)hv, (void)kbytes;  // the kernel runs on sm_90+ only (kkt_solve_warp_applies)
#endif
}

/// Unit u = (chunk slot u / HV, value head u % HV): the warps of the grid walk the units (consecutive warps take the
/// value heads of one chunk, which share k rows through the L2). Once a unit's Gram is in registers, the warp looks up
/// its next unit's chunk and (prm.prefetch) hints the L2 to fetch that unit's rows, so the next copies wait less.
template <typename TK, typename TO>
__global__ void __launch_bounds__(kUnitWarps * 32, kUnitBlocks)
    kkt_solve_warp_kernel(const KktArgs args, const GdnOut out, const WarpKktParams prm) {
  pdl_wait_and_release();
  extern __shared__ float4 smem[];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  unsigned char* const region = reinterpret_cast<unsigned char*>(smem) + warp * kWarpBytes;
  TK* const ks = reinterpret_cast<TK*>(region);
  float* const tile = reinterpret_cast<float*>(region);  // in the k tile's bytes
  float* const gate_beta = reinterpret_cast<float*>(region + kTileBytes);
  uint64_t* const bar = reinterpret_cast<uint64_t*>(region + kTileBytes + kGateBytes);
  if (lane == 0) {
    mbar_init(bar, 1);
    mbar_init_fence();
  }
  __syncwarp();
  uint32_t parity = 0;
  const int64_t HV = args.geo.HV, units = prm.slots * HV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kUnitWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kUnitWarps + warp;
  if (u >= units) return;
  const int64_t slot0 = u / HV;
  int64_t hv = u - slot0 * HV;
  ChunkRef ch = resolve_chunk<kBT>(args.geo, slot0, prm.errors, hv == 0);
  for (;;) {
    const int64_t un = u + stride;  // the next unit
    const int64_t slot_n = un / HV, hv_n = un - slot_n * HV;
    if (ch.len > 0) {  // warp-uniform
      fence_proxy_async_shared();  // the previous unit's generic accesses of the region, before the copies
      __syncwarp();
      load_k_rows_bulk(ks, prm.ld, prm.kp, args.k, static_cast<int>(args.geo.K), ch, hv / prm.group, bar);
      float gb[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) gb[j] = load_gate_or_beta<kBT>(args, ch, hv, lane + 32 * j);
#pragma unroll
      for (int j = 0; j < 4; ++j) gate_beta[lane + 32 * j] = gb[j];
      mbar_wait(bar, parity);
      parity ^= 1u;
      __syncwarp();
      GramWarp<TK> gram;
      gram.compute(ks, prm.ld, prm.kp);
      __syncwarp();  // every lane's k-tile reads are done: the A tile takes its bytes
      const ChunkRef next =
          un < units ? resolve_chunk<kBT>(args.geo, slot_n, prm.errors, hv_n == 0) : ChunkRef{0, 0, 0};
      if (prm.prefetch && next.len > 0)
        prefetch_unit(args, next, hv_n / prm.group, hv_n, 2 * static_cast<int>(args.geo.K));
      gram.kkt_tile(gate_beta, ch.len, tile);
      __syncwarp();
      invert_unit_lower_warp(tile, ch.len);
      store_rows_as<TO, kBT, 32, true>(tile, out, ch, hv, true);
      __syncwarp();  // the store's tile reads are done before the next unit's copies
      ch = next;
    } else {
      ch = un < units ? resolve_chunk<kBT>(args.geo, slot_n, prm.errors, hv_n == 0) : ChunkRef{0, 0, 0};
    }
    if (un >= units) break;
    u = un;
    hv = hv_n;
  }
}

template <typename TK, typename TO>
void launch_as(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, int device,
               cudaStream_t stream) {
  const auto kernel = kkt_solve_warp_kernel<TK, TO>;
  constexpr std::size_t smem = kUnitWarps * kWarpBytes;
  const int64_t units = prm.slots * a.geo.HV;
  const int64_t wave = cached_wave(kernel, kUnitWarps * 32, smem, device, op);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((units + kUnitWarps - 1) / kUnitWarps, wave));
  // The L2 hints pay where a warp has at most two units (its second load is then not hidden behind other warps'
  // work); with more they were slower (bench/results/h200/gdn.md, thirty-third session).
  // (The testing mode `always` takes them on every grid, so that tests reach them whatever the GPU's size.)
  // FUSEOPS_GDN_KKT_WARP_PREFETCH=0 switches them off (A/B runs; no value depends on them).
  static const bool hints_off = env_switched_off("FUSEOPS_GDN_KKT_WARP_PREFETCH");
  WarpKktParams p = prm;
  p.prefetch = !hints_off && (units <= 2 * wave * kUnitWarps ||
                              kkt_warp_mode.load(std::memory_order_relaxed) == KktWarpForTesting::always);
  launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kUnitWarps * 32), smem, stream, device, a, out, p);
}

template <typename TK>
void launch_k(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, int device,
              cudaStream_t stream) {
  if (out.dtype == DType::f16) {
    launch_as<TK, __half>(op, a, out, prm, device, stream);
  } else {
    launch_as<TK, __nv_bfloat16>(op, a, out, prm, device, stream);
  }
}

}  // namespace

bool kkt_solve_warp_applies(const KktArgs& a, const GdnOut& out, int64_t kp, bool k_vec, int device, bool one_wave) {
  static const bool off = env_switched_off("FUSEOPS_GDN_KKT_WARP");
  const KktWarpForTesting mode = kkt_warp_mode.load(std::memory_order_relaxed);
  if (mode == KktWarpForTesting::never || (mode == KktWarpForTesting::rule && (off || one_wave))) return false;
  if (!is_sm90_or_newer(device)) return false;  // bulk copies and mbarriers
  const bool k16 = a.k.dtype == DType::f16 || a.k.dtype == DType::bf16;
  const bool o16 = out.dtype == DType::f16 || out.dtype == DType::bf16;
  return a.geo.BT == kBT && k16 && o16 && kp <= 128 && k_vec && reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0;
}

void launch_kkt_solve_warp(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, int device,
                           void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  kkt_warp_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.k.dtype == DType::f16) {
    launch_k<__half>(op, a, out, prm, device, s);
  } else {
    launch_k<__nv_bfloat16>(op, a, out, prm, device, s);
  }
}

}  // namespace gdn
}  // namespace fuseops::detail::cuda
