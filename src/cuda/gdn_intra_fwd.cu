// The intra-chunk stage of the CUDA chunk_gated_delta_rule in one kernel: kkt, its inverse and recompute_w_u,
// w = (I + A)^{-1} (beta e^g k) and u = (I + A)^{-1} (beta v) per chunk and value head, with the inverse kept in
// shared memory (the forward never reads it back: FLA's chunk_gated_delta_rule_fwd_intra fuses the same three steps).
// The separate kernels (chunk_gated_delta_rule_fwd_kkt_solve into a 16-bit Ai, then recompute_w_u_fwd) cost the
// inverse's round trip through memory, a second read of k per value head and a launch; this kernel keeps their
// numerics: the same Gram / kkt_tile / invert_unit_lower routines (gdn_intra.cuh), the inverse rounded once to the
// input dtype as the separate path stores it, and the same column scaling of it and products (gdn_wu.cuh). So the
// forward gives the same bytes either way (test GdnForward.StagesAligned / Stages compare them).
//
// One 256-thread block per (chunk, key head), looping over the key head's value heads (split over several blocks
// when the grid would be small, as the kkt kernel). Per unit: k tile (raw, kept) and the first value head's v tile by
// cp.async; Gram in registers. Per value head (five block barriers): the kkt tile (fp32), the column factors beta e^g
// and beta; the next value head's v tile copied (cp.async, two v tiles alternating) so that it lands during this whole
// head; the inverse (fp32, in place); its columns scaled into the A operands of w and u (scale_inverse_columns: the
// inverse rounded once to the input dtype as kkt_solve stores it, times beta e^g or beta, rounded once), so that w
// and u multiply the raw k and v tiles; w and u products stored from the mma fragments as pairs (the first version,
// staging them in shared memory for 16-byte stores with one warp per row of scaling, measured 1.45 ms against 1.27 ms
// at 16 / 64 heads, T = 32768). Bulk-store variant (kBulk, sm_90, rows of 16-byte multiples; the default wherever
// it applies): the products go as pairs into shared memory instead (u into the head's fp32 tile slot, dead once the
// inverse is scaled; w, after a barrier, into the head's v tile) and leave by one cp.async.bulk per row, so the
// 4-byte stores that each touched 8 rows no longer load the LSU; two tile slots alternate between heads (108 KB of
// shared memory at K = V = 128, still two blocks per SM). Measured 284 -> 256 us at 16 / 64 heads, T = 8192.
// Intra-first form (WuArgs::ready; gdn_forward_impl.h): a persistent grid on the SMs fwd_h leaves free walks the
// (chunk, value head) items in chunk order, one head per item, and sets a flag per item after its w / u stores, for
// fwd_h, which is launched right after this kernel and polls the flags (same arithmetic per item, same bytes).
// f16 / bf16 only (k, v, w, u of one dtype); other dtypes take the separate kernels. On grids of more than four
// (chunk, value head) units per SM at chunk 64 (K, V <= 128, 16-byte rows), the warp-per-unit form of
// gdn_intra_fwd_warp.cu runs instead, with the same bytes (launch_intra).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/bulk_copy.cuh"
#include "cuda/device_error.h"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_intra_fwd_warp.h"
#include "cuda/gdn_wu.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::ChunkRef;
using gdn::kLdA;
using gdn::kThreads;

struct IntraParams {
  int64_t slots;
  int group;          ///< value heads per key head
  int heads_per_cta;  ///< value heads of one key head per block
  int parts;          ///< blocks per (chunk, key head)
  int kp;             ///< K padded to 16 (the Gram's steps)
  int dp;             ///< max(K, V) padded to 32 (the product's column items); tiles are [BT][dp + 8]
  int row_shift;      ///< gdn::load_k_tile's row_shift for dp columns (k and v tiles)
  gdn::WuVec vec;     ///< 16-byte rows (k, v)
  gdn::WuVec pairs;   ///< 4-byte pairs of output elements (w, u)
  unsigned* ready;    ///< the intra-first form: flags [HV][ready_stride] (WuArgs::ready); a flat chunk-major item loop
  int64_t ready_stride;
  DeviceErrorRecord* errors;
};

/// Bytes of the fp32 region: the kkt / inverse tile and the merge scratch.
template <int BT>
constexpr std::size_t float_region_bytes() {
  return (gdn::kTileFloats<BT> + gdn::kScratchFloats<BT>) * sizeof(float);
}

/// Bytes of one fp32 tile slot of the bulk-store kernel: the kkt / inverse tile, later the u rows staged [BT][ld].
template <int BT>
__host__ __device__ std::size_t bulk_tile_bytes(int ld) {
  const std::size_t f = gdn::kTileFloats<BT> * sizeof(float), r = static_cast<std::size_t>(BT) * ld * 2;
  return f > r ? f : r;
}

/// Dynamic shared memory. kBulk = false: ks, Xv[2] [BT][ld] (16-bit), Aw, Au [BT][kLdA], the fp32 tile and the merge
/// scratch (90.5 KB at BT = 64, K = V = 128: two blocks per SM). kBulk: the same with the merge scratch first and two
/// tile slots (bulk_tile_bytes) after it (107.5 KB there, still two blocks per SM). Registers bounded for two blocks
/// per SM: three (80 registers, ~100 bytes spilled) measured 10-17% slower on the H200 (docs/ops/gdn-log.md).
template <int BT, bool kBulk>
std::size_t intra_smem_bytes(int ld) {
  const std::size_t tiles16 =
      3 * static_cast<std::size_t>(BT) * ld * 2 + 2 * static_cast<std::size_t>(BT) * kLdA<BT> * 2;
  if (!kBulk) return tiles16 + float_region_bytes<BT>();
  return tiles16 + gdn::kScratchFloats<BT> * sizeof(float) + 2 * bulk_tile_bytes<BT>(ld);
}

/// kBulk: w and u leave through shared memory by bulk copies (one cp.async.bulk per row, sm_90) instead of 4-byte
/// stores from the mma fragments: u is staged in the head's tile slot (dead once the inverse is scaled), w in its v
/// tile (dead once u is formed); the two tile slots alternate between value heads, and each copying thread waits for
/// its copies' reads before the barrier behind which a slot or v tile is written again.
template <typename TK, int BT, bool kBulk>
__global__ void __launch_bounds__(kThreads, 2)
    intra_fwd_kernel(const KktArgs ka, const WuArgs a, const IntraParams prm) {
  pdl_wait();
  // the intra-first form: fwd_h launches once every block has passed this, and runs beside this grid; else fwd_h
  // launches once every block is done (as in gdn_intra_fwd_warp.cu; 0.975-1.0x the forward's time on the grids of
  // this kernel, bench/results/h200/gdn.md, thirty-fifth session)
  if (prm.ready != nullptr) pdl_release();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int ld = prm.dp + 8;
  TK* const ks = reinterpret_cast<TK*>(smem_raw);
  TK* const xv0 = ks + BT * ld;  // v tiles of alternate value heads (Xv[h % 2])
  TK* const Aw = xv0 + 2 * BT * ld;  // the A operands of w and u: the inverse's columns scaled (scale_inverse_columns)
  TK* const Au = Aw + BT * kLdA<BT>;
  float* const region = reinterpret_cast<float*>(Au + BT * kLdA<BT>);
  float* const scratch = kBulk ? region : region + gdn::kTileFloats<BT>;
  float* const tile0 = kBulk ? region + gdn::kScratchFloats<BT> : region;
  const std::size_t tile_step = kBulk ? bulk_tile_bytes<BT>(ld) / sizeof(float) : 0;  // floats between slots
  int slot_parity = 0;  // kBulk: the tile slot of the current value head
  __shared__ ChunkRef chunk;
  __shared__ float gate_beta[2 * BT];  // g then beta of the chunk's rows, current value head
  __shared__ float colscale[2 * BT];   // beta e^g, then beta, of the rows (the inverse's column factors)
  const int tid = static_cast<int>(threadIdx.x);
  const int K = static_cast<int>(a.geo.K), V = static_cast<int>(a.V);
  const int key_units = static_cast<int>(a.geo.H) * prm.parts;

  // Items (chunk slot, key unit): slot-major over a grid (slots, key units), or, in the intra-first form, one flat
  // chunk-major loop over a persistent grid (the early chunks first: fwd_h is waiting for them)
  const bool first = prm.ready != nullptr;
  const int64_t items = first ? prm.slots * key_units : prm.slots;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t slot = first ? item / key_units : item;
    const ChunkRef ch = gdn::block_chunk<BT>(a.geo, slot, prm.errors, chunk);
    if (ch.len == 0) continue;
    const int L = ch.len;
    const int y_begin = first ? static_cast<int>(item % key_units) : static_cast<int>(blockIdx.y);
    const int y_end = first ? y_begin + 1 : key_units, y_step = first ? 1 : static_cast<int>(gridDim.y);
    for (int y = y_begin; y < y_end; y += y_step) {
      const int hk = y / prm.parts;
      const int hv_begin = hk * prm.group + (y - hk * prm.parts) * prm.heads_per_cta;
      const int hv_end = min(hv_begin + prm.heads_per_cta, (hk + 1) * prm.group);
      auto load_v = [&](int hv) {
        gdn::load_k_tile<TK, BT>(xv0 + (hv - hv_begin) % 2 * BT * ld, ld, prm.dp, a.v, V, ch, hv, prm.vec.v,
                                 prm.row_shift);
        cp_async_commit();
      };
      if (kBulk && tid < 2 * BT) bulk_wait_read();  // the previous unit's staged rows are read
      __syncthreads();  // the previous unit is done with every tile
      gdn::load_k_tile<TK, BT>(ks, ld, prm.dp, a.k, K, ch, hk, prm.vec.k, prm.row_shift);
      load_v(hv_begin);
      float gb = tid < 2 * BT ? gdn::load_gate_or_beta<BT>(ka, ch, hv_begin, tid) : 0.f;
      cp_async_wait_all();
      if (tid < 2 * BT) gate_beta[tid] = gb;
      __syncthreads();
      gdn::Gram<TK, BT> gram;
      gram.compute(ks, ld, prm.kp, L);

      // Per value head: five block barriers (seven with kBulk). The next head's v tile is copied one whole head ahead
      // (two buffers).
      for (int hv = hv_begin; hv < hv_end; ++hv) {
        TK* const Xv = xv0 + (hv - hv_begin) % 2 * BT * ld;
        // kBulk: the other slot may still be read by a bulk copy
        float* const tile = kBulk ? tile0 + slot_parity * tile_step : tile0;
        gram.kkt_tile(gate_beta, L, tile);  // the tile's last reader (scale_inverse_columns) is behind a barrier
        if (tid < BT) {  // rows past the chunk: g = 0, beta = 1
          const float b = gate_beta[BT + tid];
          colscale[tid] = b * expf(gate_beta[tid]);
          colscale[BT + tid] = b;
        }
        cp_async_wait_all();  // this value head's v tile
        if (kBulk && tid < 2 * BT) bulk_wait_read();  // the previous head's staged rows (Xv[other], its slot) are read
        __syncthreads();      // also: the previous head's products are done with Xv[other], Aw, Au
        const bool next = hv + 1 < hv_end;
        if (next) load_v(hv + 1);
        if (next && tid < 2 * BT) gb = gdn::load_gate_or_beta<BT>(ka, ch, hv + 1, tid);  // behind the inverse
        gdn::invert_unit_lower<BT, true>(tile, scratch, L);  // tensor_core_inverse(16-bit)
        gdn::scale_inverse_columns<TK, BT>(
            [&](int i, int j0, float(&f)[8]) {  // rounded as kkt_solve stores the inverse
              const float4 lo = *reinterpret_cast<const float4*>(tile + i * gdn::kTileLd<BT> + j0);
              const float4 hi = *reinterpret_cast<const float4*>(tile + i * gdn::kTileLd<BT> + j0 + 4);
              const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
              for (int e = 0; e < 8; ++e) f[e] = to_float(from_float<TK>(x[e]));
            },
            Aw, Au, colscale, colscale + BT);
        if (next && tid < 2 * BT) gate_beta[tid] = gb;  // its last readers (kkt_tile, colscale) are behind a barrier
        __syncthreads();
        if constexpr (kBulk) {
          TK* const wdst = static_cast<TK*>(a.w.data) + gdn::at(a.w, ch.batch, ch.t0, hv);
          TK* const udst = static_cast<TK*>(a.u.data) + gdn::at(a.u, ch.batch, ch.t0, hv);
          TK* const ustage = reinterpret_cast<TK*>(tile);
          gdn::lower_times<TK, BT>(Au, Xv, ld, ustage, L, V);
          __syncthreads();  // every u product is done with Xv
          gdn::lower_times<TK, BT>(Aw, ks, ld, Xv, L, K);
          fence_proxy_async_shared();
          __syncthreads();
          if (tid < 2 * BT) {  // one row each: u rows, then w rows
            const int i = tid % BT;
            if (i < L) {
              if (tid < BT) {
                bulk_store(udst + i * a.u.stride_t, smem_addr(ustage + i * ld), static_cast<uint32_t>(V) * 2);
              } else {
                bulk_store(wdst + i * a.w.stride_t, smem_addr(Xv + i * ld), static_cast<uint32_t>(K) * 2);
              }
            }
            bulk_commit();
          }
          slot_parity ^= 1;
        } else {
          gdn::lower_times_to_rows<TK, BT>(Aw, ks, ld, static_cast<TK*>(a.w.data) + gdn::at(a.w, ch.batch, ch.t0, hv),
                                           a.w.stride_t, L, K, prm.pairs.w);
          gdn::lower_times_to_rows<TK, BT>(Au, Xv, ld, static_cast<TK*>(a.u.data) + gdn::at(a.u, ch.batch, ch.t0, hv),
                                           a.u.stride_t, L, V, prm.pairs.u);
        }
        if (first) {  // this (chunk, value head)'s w and u are stored: its flag, after them
          __syncthreads();
          if (tid == 0) {
            __threadfence();
            st_relaxed_gpu(prm.ready + hv * prm.ready_stride + slot, 1u);
          }
        }
      }
    }
  }
  if (prm.ready == nullptr) pdl_release();
  if (kBulk && tid < 2 * BT) bulk_wait();  // the block's shared memory outlives its copies
}

std::atomic<bool> intra_bulk_off_for_testing{false};  ///< set_intra_bulk_off_for_testing
std::atomic<int64_t> intra_bulk_launches{0};           ///< intra_bulk_launches_for_testing

/// Whether the bulk-store kernel of (TK, BT) with rows of `ld` elements fits the device's shared memory per block and
/// keeps as many blocks per SM as the fragment-store kernel (its tile slots outgrow the fp32 tile from max(K, V) > 128
/// at chunk 64, e.g. one block per SM instead of two at 160). Cached per (device, ld). Errors name `op`.
template <typename TK, int BT>
bool bulk_keeps_occupancy(int ld, int device, const char* op) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, ld);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
             "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  const std::size_t bulk = intra_smem_bytes<BT, true>(ld), plain = intra_smem_bytes<BT, false>(ld);
  bool keeps = bulk + 8 * 1024 <= static_cast<std::size_t>(optin);  // static shared memory below 8 KiB
  if (keeps) {
    allow_smem(intra_fwd_kernel<TK, BT, true>, bulk, op);
    allow_smem(intra_fwd_kernel<TK, BT, false>, plain, op);
    keeps = resident_blocks(intra_fwd_kernel<TK, BT, true>, kThreads, bulk, device, op) >=
            resident_blocks(intra_fwd_kernel<TK, BT, false>, kThreads, plain, device, op);
  }
  known.emplace(key, keeps);
  return keeps;
}

/// Whether the intra kernel stores w and u by bulk copies (kBulk): sm_90 code, not the intra-first form (whose ready
/// flags follow plain stores), rows of a multiple of 16 bytes at 16-byte aligned addresses, and no fewer blocks per
/// SM than the fragment-store kernel (bulk_keeps_occupancy); FUSEOPS_GDN_INTRA_BULK=0 turns it off.
template <typename TK, int BT>
bool intra_bulk_applies(const WuArgs& a, int ld, int device, const char* op) {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_INTRA_BULK");
  return allowed && !intra_bulk_off_for_testing.load(std::memory_order_relaxed) && a.ready == nullptr &&
         gdn::rows_16b(a.w, a.geo.K) && gdn::rows_16b(a.u, a.V) && is_sm90_or_newer(device) &&
         bulk_keeps_occupancy<TK, BT>(ld, device, op);
}

template <typename TK, int BT>
void launch_intra(const KktArgs& ka, const WuArgs& a, int device, cudaStream_t s) {
  const char* op = "chunk_gated_delta_rule";
  if constexpr (BT == 64) {
    if (gdn::intra_fwd_warp_applies(ka, a, device) && gdn::launch_intra_fwd_warp(op, ka, a, device, s)) return;
  }
  IntraParams prm{};
  prm.slots = gdn::chunk_slots(a.geo);
  const int64_t group = a.geo.HV / a.geo.H;
  const gdn::HeadSplit split = gdn::split_value_heads(prm.slots * a.geo.H, group, 2LL * sm_count(device));
  prm.group = static_cast<int>(group);
  prm.heads_per_cta = split.heads_per_cta;
  prm.parts = split.parts;
  prm.kp = static_cast<int>((a.geo.K + 15) / 16 * 16);
  prm.dp = static_cast<int>((std::max(a.geo.K, a.V) + 31) / 32 * 32);
  prm.row_shift = gdn::k_tile_row_shift<TK>(prm.dp);
  prm.vec.k = gdn::rows_16b(a.k, a.geo.K);
  prm.vec.v = gdn::rows_16b(a.v, a.V);
  prm.pairs.w = a.geo.K % 2 == 0 && gdn::rows_pairs(a.w);  // an odd last column takes element stores
  prm.pairs.u = a.V % 2 == 0 && gdn::rows_pairs(a.u);
  prm.errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  prm.ready = a.ready;
  prm.ready_stride = a.ready_stride;
  if (a.ready) {  // intra first: one value head per item (a chunk's heads at once, by as many blocks; two heads per
    // item measured 1-2% slower at 2/8 [8192] and [32768])
    prm.heads_per_cta = 1;
    prm.parts = prm.group;
    const int64_t words = (a.o_ready ? 2 : 1) * a.geo.HV * a.ready_stride;  // the flags (and fwd_h's counters)
    check_cuda(cudaMemsetAsync(a.ready, 0, static_cast<std::size_t>(words) * sizeof(unsigned), s), op,
               "cudaMemsetAsync");
  }
  const dim3 grid = a.ready ? dim3(static_cast<unsigned>(a.intra_blocks))
                            : dim3(gdn::grid_x(prm.slots), gdn::grid_y(a.geo.H * prm.parts));
  // K = V = 256 at BT = 64: 138.5 KB, with bulk stores 187.5 KB (sm_90: 227 KB)
  const int ld = prm.dp + 8;
  if (intra_bulk_applies<TK, BT>(a, ld, device, op)) {
    auto kernel = intra_fwd_kernel<TK, BT, true>;
    allow_smem(kernel, intra_smem_bytes<BT, true>(ld), op);
    launch_kernel(kernel, grid, dim3(kThreads), intra_smem_bytes<BT, true>(ld), s, device, ka, a, prm);
    intra_bulk_launches.fetch_add(1, std::memory_order_relaxed);
  } else {
    auto kernel = intra_fwd_kernel<TK, BT, false>;
    allow_smem(kernel, intra_smem_bytes<BT, false>(ld), op);
    launch_kernel(kernel, grid, dim3(kThreads), intra_smem_bytes<BT, false>(ld), s, device, ka, a, prm);
  }
}

}  // namespace

void set_intra_bulk_off_for_testing(bool off) { intra_bulk_off_for_testing.store(off, std::memory_order_relaxed); }
int64_t intra_bulk_launches_for_testing() { return intra_bulk_launches.load(std::memory_order_relaxed); }

bool chunk_gated_delta_rule_fwd_intra(const KktArgs& ka, const WuArgs& a, int device, void* stream) {
  const DType dt = a.k.dtype;
  if (a.v.dtype != dt || a.w.dtype != dt || a.u.dtype != dt) return false;
  const char* op = "chunk_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.geo.BT != 16 && a.geo.BT != 32 && a.geo.BT != 64) return false;
  const bool launched = gdn::with_16bit(dt, [&](auto tag) {
    using TK = decltype(tag);
    switch (a.geo.BT) {
      case 16: launch_intra<TK, 16>(ka, a, device, s); break;
      case 32: launch_intra<TK, 32>(ka, a, device, s); break;
      default: launch_intra<TK, 64>(ka, a, device, s); break;
    }
  });
  if (launched) after_launch(op, s, device);
  return launched;
}

}  // namespace fuseops::detail::cuda
