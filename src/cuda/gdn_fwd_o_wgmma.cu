// CUDA backend of chunk_fwd_o, warpgroup (wgmma, sm_90a) variant for the main shapes: q, k, v_new and h of one
// 16-bit dtype, chunk 64, K = 128, V a multiple of 128, every input a tensor map can describe (16-byte rows, no
// batch-broadcast view); docs/ops/gdn-log.md "chunk_fwd_o kernel". Everything else takes gdn_fwd_o_mma.cu.
//   o_i = scale (exp(g_i) q_i^T h[chunk] + sum_{j <= i} (q_i . k_j) exp(g_i - g_j) v_new_j).
// Work items as the mma.sync kernel: (chunk slot, key head, part, block of 128 columns of V), each walking value heads
// [hv_begin, hv_end) of its key head. One block of two warpgroups per item, two blocks per SM. Tiles arrive by
// tensor-map copies with 128-byte swizzle on mbarriers, issued by thread 0: q and k of the chunk (boxes [64 rows][64]),
// then per value head h [128][128] and v_new [64][128] (boxes of 64 columns). Rows past the tensor's end arrive as zero;
// rows past the chunk inside the tensor (the next sequence of a varlen batch) are real data: no stored row reads q's,
// the causal mask selects 0 for k's, and v_new's are zeroed in shared memory before P v_new (0 x NaN would be NaN).
// Per item: S = q k^T (64 x 64; both warpgroups compute all of it: wgmma with q and k from shared memory). Per value
// head, warpgroup wg computes columns [64 wg, 64 wg + 64) of the block:
//   P = S exp(g_i - g_j) for j <= i < len, else 0, rounded to TK in registers (the accumulator layout of S is the A
//       fragment layout of the next product);
//   O = q h (B = h, N-major), O = exp(g_i) O, O += P v_new (A = P from registers, B = v_new, N-major);
//   o = scale O, stored from registers (rows < len).
// The next value head's h and v_new are copied into the single tile buffer as soon as every warp is done with the
// current one (a block barrier), so the copy overlaps the o stores and the next head's gating.
// Output-beside form (FwdOArgs::h_ready, docs/ops/gdn-log.md "The output-beside form"): launched while the intra-first
// form's fwd_h still runs; thread 0 polls an item's counter (ld.acquire.gpu) before copying its h and v_new, and only
// block 0 waits for fwd_h's grid, at its end. The counters are per chunk of the sequence, which is the chunk slot here
// (the intra-first form: B = 1, no cu_seqlens).
#include <atomic>
#include <cstdint>

#include "cuda/bulk_copy.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_fwd_o.cuh"
#include "cuda/tensor_map.h"
#include "cuda/wgmma.cuh"

namespace fuseops::detail::cuda {
namespace {

using namespace fwd_o;

constexpr int kBT = 64, kK = 128, kBV = 128;
constexpr int kThreadsWg = 256;
/// Shared memory (bytes, 1024-aligned tiles): q, k [2 boxes][64][64]; h [2 halves][128][64]; v_new [2 halves][64][64];
/// the gates of two value heads; the mbarriers of q / k and of h / v_new; the item's chunk.
constexpr int kQBytes = kBT * kK * 2, kHBytes = kK * kBV * 2, kVBytes = kBT * kBV * 2;
constexpr int kOffK = kQBytes, kOffH = 2 * kQBytes, kOffV = kOffH + kHBytes, kOffG = kOffV + kVBytes;
constexpr int kOffBar = kOffG + 2 * kBT * 4;
constexpr int kOffChunk = kOffBar + 2 * 8;
constexpr int kSmemWg = kOffChunk + static_cast<int>(sizeof(gdn::ChunkRef));

/// q, k, v_new: 4-D maps (columns, heads, T, B), boxes 64 x 1 x 64 x 1; h: 3-D (V, K, B NS HV), boxes 64 x 128 x 1.
struct FwdOMaps {
  CUtensorMap q, k, v, h;
};

template <typename TK>
__global__ void __launch_bounds__(kThreadsWg, 2)
    fwd_o_wgmma_kernel(const FwdOArgs a, const FwdOParams prm, const __grid_constant__ FwdOMaps maps) {
  // the output-beside form (a.h_ready): fwd_h, launched before, is still running; an item's h and v_new are read once
  // their counter is full, and block 0 waits for fwd_h's completion at its end instead of at its start: the grid
  // completes only after it, so what runs after this grid sees fwd_h's writes too (final_state), while the other blocks
  // leave their SMs to the items after theirs as soon as they are done
  if (a.h_ready != nullptr) {
    pdl_release();
  } else {
    pdl_wait_and_release();
  }
  extern __shared__ __align__(1024) unsigned char smem_raw[];  // no static shared memory: the tiles stay 1024-aligned
  gdn::ChunkRef& chunk = *reinterpret_cast<gdn::ChunkRef*>(smem_raw + kOffChunk);
  float* const gsm = reinterpret_cast<float*>(smem_raw + kOffG);  // [2][kBT]: gates of value heads of each parity
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem_raw + kOffBar);  // [0] q / k, [1] h / v_new
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const uint32_t smem0 = smem_addr(smem_raw);
  if ((smem0 & 1023u) != 0) __trap();  // the swizzled tiles need 1024-byte alignment (never expected to fire)
  if (tid == 0) {
    mbar_init(bars, 1);
    mbar_init(bars + 1, 1);
  }
  mbar_init_fence();
  __syncthreads();
  uint32_t qk_phase = 0, hv_phase = 0;
  const int row_a = (warp & 3) * 16 + lane / 4, row_b = row_a + 8;  // this thread's rows of every fragment
  const int64_t HV = a.geo.HV;
  const int units = static_cast<int>(a.geo.H) * prm.parts * prm.vblocks;  // items per chunk slot
  const int64_t items = prm.slots * units;
  const bool gated = a.g.data != nullptr;
  const bool pair = (prm.vec & kPairO) != 0, native_o = pair && (prm.vec & kNativeO) != 0;
  const uint32_t q_at = smem0, k_at = smem0 + kOffK;
  // this warpgroup's 64 columns of h and v_new (one box each)
  const uint32_t h_at = smem0 + kOffH + static_cast<uint32_t>(wg * (kHBytes / 2));
  const uint32_t v_at = smem0 + kOffV + static_cast<uint32_t>(wg * (kVBytes / 2));
  // the operands' descriptors; a k-step adds its byte offset (wgmma_desc_add)
  const uint64_t q_desc = wgmma_desc_sw128(q_at), k_desc = wgmma_desc_sw128(k_at);
  const uint64_t h_desc = wgmma_desc_sw128_mn(h_at, 1024), v_desc = wgmma_desc_sw128_mn(v_at, 1024);

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    // the previous item is done with every tile, the gates and `chunk`
    const FwdOItem it = fwd_o_item<kBT>(a, prm, item, units, kBV, chunk);
    const gdn::ChunkRef ch = it.ch;
    if (ch.len == 0) continue;
    const int L = ch.len, hk = it.hk, v0 = it.v0, hv_begin = it.hv_begin, hv_end = it.hv_end;
    const int64_t hrow0 = (ch.batch * a.h.slots + gdn::state_slot(a.geo, it.slot, ch)) * HV;  // h map's third coordinate
    const int t0 = static_cast<int>(ch.t0), b = static_cast<int>(ch.batch);
    auto issue_hv = [&](int hv) {  // thread 0: h and v_new of value head hv
      if (a.h_ready != nullptr) {
        const unsigned* const counter = a.h_ready + hv * a.h_ready_stride + it.slot;
        while (ld_acquire_gpu(counter) < a.h_ready_count) __nanosleep(64);
        fence_proxy_async_global();  // the rows the acquire made visible, read by tensor-map copies
      }
      mbar_arrive_expect(bars + 1, static_cast<uint32_t>(kHBytes + kVBytes));
      for (int half = 0; half < 2; ++half) {
        tma_load_3d(smem0 + kOffH + half * (kHBytes / 2), &maps.h, v0 + 64 * half, 0, static_cast<int>(hrow0 + hv),
                    bars + 1);
        tma_load_4d(smem0 + kOffV + half * (kVBytes / 2), &maps.v, v0 + 64 * half, hv, t0, b, bars + 1);
      }
    };
    if (tid == 0) {
      mbar_arrive_expect(bars, static_cast<uint32_t>(2 * kQBytes));
      for (int box = 0; box < 2; ++box) {
        tma_load_4d(q_at + box * (kQBytes / 2), &maps.q, 64 * box, hk, t0, b, bars);
        tma_load_4d(k_at + box * (kQBytes / 2), &maps.k, 64 * box, hk, t0, b, bars);
      }
      issue_hv(hv_begin);
    }
    auto load_gate = [&](int hv) {  // g of row tid < kBT (0 past the chunk or without g)
      return gated && tid < L ? static_cast<const float*>(a.g.data)[gdn::at(a.g, ch.batch, ch.t0 + tid, hv)] : 0.f;
    };
    if (tid < kBT) gsm[(hv_begin & 1) * kBT + tid] = load_gate(hv_begin);

    // S = q k^T (the key head's scores, fp32; gated per value head below)
    float sacc[32];
    mbar_wait(bars, qk_phase);
    qk_phase ^= 1u;
    wgmma_fence();
#pragma unroll
    for (int st = 0; st < kK / 16; ++st) {
      const uint32_t off = static_cast<uint32_t>((st >> 2) * (kQBytes / 2) + (st & 3) * 32);
      wgmma_ss<TK, 64>(sacc, wgmma_desc_add(q_desc, off), wgmma_desc_add(k_desc, off), st > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sacc);
    __syncthreads();  // the first value head's gates

    for (int hv = hv_begin; hv < hv_end; ++hv) {
      const bool next = hv + 1 < hv_end;
      const float* const gs = gsm + (hv & 1) * kBT;
      // the next value head's gates: loaded now, stored into the other parity's table before the barrier below
      const float g_next = next && tid < kBT ? load_gate(hv + 1) : 0.f;
      // P: accumulator tiles 2 j and 2 j + 1 of S are the A fragment of k-step j (columns 16 j ..)
      uint32_t pk[kBT / 16][4];
      {
        const float ga = gs[row_a], gb = gs[row_b];
        float p[32];
#pragma unroll
        for (int t = 0; t < kBT / 8; ++t) {
          const int c = 8 * t + 2 * (lane % 4);
          const float g0 = gs[c], g1 = gs[c + 1];
          p[4 * t + 0] = gated_score(sacc[4 * t + 0], row_a, c, L, ga, g0, gated);
          p[4 * t + 1] = gated_score(sacc[4 * t + 1], row_a, c + 1, L, ga, g1, gated);
          p[4 * t + 2] = gated_score(sacc[4 * t + 2], row_b, c, L, gb, g0, gated);
          p[4 * t + 3] = gated_score(sacc[4 * t + 3], row_b, c + 1, L, gb, g1, gated);
        }
#pragma unroll
        for (int j = 0; j < kBT / 16; ++j) {
          pk[j][0] = pack2<TK>(p[8 * j + 0], p[8 * j + 1]);
          pk[j][1] = pack2<TK>(p[8 * j + 2], p[8 * j + 3]);
          pk[j][2] = pack2<TK>(p[8 * j + 4], p[8 * j + 5]);
          pk[j][3] = pack2<TK>(p[8 * j + 6], p[8 * j + 7]);
        }
      }
      const float ea = gated ? __expf(gs[row_a]) : 1.f, eb = gated ? __expf(gs[row_b]) : 1.f;

      // O = q h, then exp(g_i) O + P v_new
      float oacc[32];
      mbar_wait(bars + 1, hv_phase);
      hv_phase ^= 1u;
      if (L < kBT) {
        // Rows [L, 64) of this warpgroup's v_new box: zeros past the tensor's end, but in a varlen batch the next
        // sequence's rows. P is 0 there, and 0 x Inf / NaN is NaN: a non-finite v_new of the next sequence would reach
        // this one's o. Zeroed (whole 128-byte rows, so the swizzle does not matter) by the warpgroup's threads, fenced
        // for the asynchronous proxy (the wgmma below, the next head's copy), then the warpgroup's named barrier.
        for (int e = tid % 128; e < (kBT - L) * 8; e += 128) {
          const uint32_t at = v_at + static_cast<uint32_t>((L + e / 8) * 128 + (e % 8) * 16);
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0u) : "memory");
        }
        fence_proxy_async_shared();
        if (wg == 0) {
          asm volatile("bar.sync 1, 128;" ::: "memory");
        } else {
          asm volatile("bar.sync 2, 128;" ::: "memory");
        }
      }
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < kK / 16; ++st) {
        const uint32_t qoff = static_cast<uint32_t>((st >> 2) * (kQBytes / 2) + (st & 3) * 32);
        const uint64_t hd = wgmma_desc_add(h_desc, static_cast<uint32_t>(st * 2048));
        wgmma_ss<TK, 64, true>(oacc, wgmma_desc_add(q_desc, qoff), hd, st > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(oacc);
      fwd_o::scale_rows(oacc, ea, eb);
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kBT / 16; ++j) {
        wgmma_rs<TK, 64, true>(oacc, pk[j], wgmma_desc_add(v_desc, static_cast<uint32_t>(j * 2048)), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(oacc);
      if (next && tid < kBT) gsm[((hv + 1) & 1) * kBT + tid] = g_next;
      __syncthreads();  // every warp is done with h, v_new and this head's gates; the next gates are visible
      if (next && tid == 0) issue_hv(hv + 1);  // in flight while o is stored and the next head is gated

      const float sc = a.scale;
      const int64_t oa = gdn::at(a.o, ch.batch, ch.t0 + row_a, hv) + v0 + 64 * wg, ob = oa + 8 * a.o.stride_t;
      if (native_o) {  // o in TK, two-element stores
        TK* const op = static_cast<TK*>(a.o.data);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int c = 8 * t + 2 * (lane % 4);
          if (row_a < L) *reinterpret_cast<uint32_t*>(op + oa + c) = pack2<TK>(sc * oacc[4 * t], sc * oacc[4 * t + 1]);
          if (row_b < L) *reinterpret_cast<uint32_t*>(op + ob + c) = pack2<TK>(sc * oacc[4 * t + 2], sc * oacc[4 * t + 3]);
        }
      } else {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int c = 8 * t + 2 * (lane % 4);
          if (row_a < L) store_two(a.o, oa + c, sc * oacc[4 * t], sc * oacc[4 * t + 1], true, pair);
          if (row_b < L) store_two(a.o, ob + c, sc * oacc[4 * t + 2], sc * oacc[4 * t + 3], true, pair);
        }
      }
    }
  }
  if (a.h_ready != nullptr && blockIdx.x == 0) pdl_wait();
}

/// The h states [B, NS, HV, K, V] (contiguous) as a 3-D map (V, K, B NS HV), boxes 64 x 128 x 1.
bool states_map(CUtensorMap* m, const FwdOArgs& a) {
  const int64_t rows = a.geo.B * a.h.slots * a.geo.HV;
  if (rows > INT32_MAX) return false;
  const int64_t dims[3] = {a.V, a.geo.K, rows};
  const int64_t strides[2] = {a.V, a.geo.K * a.V};
  const uint32_t box[3] = {64, static_cast<uint32_t>(kK), 1};
  return tensor_map_16b_sw128(m, a.q.dtype, 3, a.h.data, dims, strides, box);
}

std::atomic<bool> fwd_o_beside_off_for_testing{false};
std::atomic<int64_t> fwd_o_beside_launches{0};  ///< launches in the output-beside form (tests)

/// Whether the wgmma kernel is switched on (FUSEOPS_GDN_FWD_O_WGMMA=0 turns it off).
bool wgmma_fwd_o_switched_on() {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_FWD_O_WGMMA");
  return allowed;
}

}  // namespace

/// Launches the wgmma kernel where it applies (see the file comment; FUSEOPS_GDN_FWD_O_WGMMA=0 turns it off) and
/// returns whether it did.
bool chunk_fwd_o_wgmma(const FwdOArgs& a, int device, cudaStream_t s) {
  const DType dt = a.q.dtype;
  if (!wgmma_fwd_o_switched_on() || a.geo.BT != kBT || a.geo.K != kK || a.V % kBV != 0 || a.geo.T > INT32_MAX ||
      (dt != DType::bf16 && dt != DType::f16) || a.k.dtype != dt || a.v_new.dtype != dt || a.h.dtype != dt ||
      !runs_sm90a_code(device)) {
    return false;
  }
  FwdOMaps maps{};
  if (!gdn::rows_16b(a.q, a.geo.K) || !gdn::rows_16b(a.k, a.geo.K) || !gdn::rows_16b(a.v_new, a.V) ||
      reinterpret_cast<uintptr_t>(a.h.data) % 16 != 0 || !gdn_rows_map(&maps.q, a.q, dt, a.geo.K, a.geo.H, a.geo) ||
      !gdn_rows_map(&maps.k, a.k, dt, a.geo.K, a.geo.H, a.geo) ||
      !gdn_rows_map(&maps.v, a.v_new, dt, a.V, a.geo.HV, a.geo) || !states_map(&maps.h, a)) {
    return false;
  }
  const FwdOParams prm = fwd_o_params(a, kBV, device);
  const int64_t items = fwd_o_items(a, prm);
  auto launch = [&](auto kernel) {
    allow_smem(kernel, kSmemWg, "chunk_fwd_o");
    launch_kernel(kernel, dim3(gdn::grid_x(items)), dim3(kThreadsWg), kSmemWg, s, device, a, prm, maps);
  };
  if (dt == DType::bf16) {
    launch(fwd_o_wgmma_kernel<__nv_bfloat16>);
  } else {
    launch(fwd_o_wgmma_kernel<__half>);
  }
  if (a.h_ready != nullptr) fwd_o_beside_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool fwd_o_beside_applies(const FwdHArgs& a, const GdnIn& q) {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_FWD_O_BESIDE");
  // the wgmma kernel must be the one chunk_fwd_o takes (the others wait for fwd_h's grid; fwd_h's counting would be
  // spent for nothing): its switch, q in 16-byte rows of k's dtype and h 16-byte aligned (its other inputs are the
  // forward's own workspace rows, and h is too unless chunk_gated_delta_rule_with_states gave it; the rest of its
  // conditions hold in the intra-first form)
  return allowed && !fwd_o_beside_off_for_testing.load(std::memory_order_relaxed) && wgmma_fwd_o_switched_on() &&
         q.dtype == a.k.dtype && gdn::rows_16b(q, a.geo.K) && reinterpret_cast<uintptr_t>(a.h.data) % 16 == 0;
}
void set_fwd_o_beside_off_for_testing(bool off) { fwd_o_beside_off_for_testing.store(off, std::memory_order_relaxed); }
int64_t fwd_o_beside_launches_for_testing() { return fwd_o_beside_launches.load(std::memory_order_relaxed); }

}  // namespace fuseops::detail::cuda
