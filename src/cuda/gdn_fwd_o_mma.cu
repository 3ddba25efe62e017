// CUDA backend of chunk_fwd_o, tensor-core variant for f16 / bf16 inputs (q, k, v_new and h of one 16-bit dtype TK;
// docs/ops/gdn-log.md "chunk_fwd_o kernel"):
//   o_i = scale (exp(g_i) q_i^T h[chunk] + sum_{j <= i} (q_i . k_j) exp(g_i - g_j) v_new_j).
// One block of BV / 16 warps per (chunk slot, value head, block of BV columns of V): BV = 128 (8 warps) when V > 64
// and K <= 128, else 64 (4 warps; V <= 64, or K > 128 where the tiles would hold one block per SM). Work items are
// numbered with the V blocks, then the value heads innermost, so the blocks that share a chunk's q and k rows run
// side by side (L2). q, k [BT][K], h [K][BV] and v_new [BT][BV] are staged in shared memory in TK (K rounded up to 16
// with zeros, columns past V zero). Warp w: rows 16 (w % RW) .. + 16 (RW = BT / 16 row warps), columns
// kWarpCols (w / RW) .. of the block (kWarpCols = 64 / 32 / 16 for BT = 64 / 32 / 16). mma.sync m16n8k16 with fp32
// accumulators:
//   S = q k^T            (only the 16 x 16 blocks on or below the diagonal that hold chunk rows)
//   P = S exp(g_i - g_j) for j <= i, else 0   (a select: the exponent is formed only where it is <= 0), rounded to TK
//   O = exp(g_i) (q h) + P v_new;  o = scale O, rounded once to o's dtype.
// Every shape takes this path: 16-byte cp.async where the base, the strides and K / V allow it, element loads
// otherwise (K or V not a multiple of 8, odd strides, misaligned views).
#include <cstdint>

#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_fwd_o.cuh"
#include "cuda/mma.cuh"
#include "cuda/vec.cuh"

namespace fuseops::detail::cuda {
namespace {

using namespace fwd_o;

constexpr int kPad = 8;  ///< row padding (elements, 16 bytes): ldmatrix rows in distinct banks
/// Threads of a block for BV columns of V.
template <int BV>
constexpr int kThreadsFor = 2 * BV;
/// Row stride (elements) of the h and v_new tiles: 144 / 272 bytes, an odd number of 16-byte units.
template <int BV>
constexpr int kLdVFor = BV + kPad;

/// Row stride (elements) of the q and k tiles for kp (K rounded up to 16) columns: kp + 8, an odd number of 16-byte
/// units, so the 8 rows of one ldmatrix matrix fall in distinct bank quads.
__host__ __device__ constexpr int qk_ld(int kp) { return kp + kPad; }

template <typename TK, int BT, int BV>
__global__ void __launch_bounds__(kThreadsFor<BV>, 256 / BV) fwd_o_mma_kernel(const FwdOArgs a, const FwdOParams prm) {
  constexpr int kThreads = kThreadsFor<BV>, kWarps = kThreads / 32, kLdV = kLdVFor<BV>;
  constexpr int kRowWarps = BT / 16;             // warps along the chunk's rows
  constexpr int kColWarps = kWarps / kRowWarps;  // warps along the block's columns
  constexpr int kWarpCols = BV / kColWarps;      // = BT
  constexpr int kNT = kWarpCols / 8;             // 8-column tiles of O per warp
  constexpr int kST = BT / 8;                    // 8-column tiles of a score row block
  static_assert(kRowWarps * kColWarps == kWarps && kWarpCols == BT && kNT % 2 == 0, "warp layout");
  pdl_wait_and_release();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float gs[BT];
  __shared__ gdn::ChunkRef chunk;
  const int K = static_cast<int>(a.geo.K), kp = (K + 15) & ~15, ldk = qk_ld(kp);
  TK* qs = reinterpret_cast<TK*>(smem_raw);  // [BT][ldk]
  TK* ks = qs + BT * ldk;                     // [BT][ldk]
  TK* hs = ks + BT * ldk;                     // [kp][kLdV]
  TK* vs = hs + kp * kLdV;                    // [BT][kLdV]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int rw = warp % kRowWarps, r0 = 16 * rw, cb = (warp / kRowWarps) * kWarpCols;
  const int row_a = r0 + lane / 4, row_b = row_a + 8;  // this thread's two rows of every fragment
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V;
  const int units = static_cast<int>(a.geo.H) * prm.parts * prm.vblocks;  // items per chunk slot
  const int64_t items = prm.slots * units;
  const bool gated = a.g.data != nullptr;
  const bool pair = (prm.vec & kPairO) != 0, native_o = pair && (prm.vec & kNativeO) != 0;
  // ldmatrix lane addresses (element offsets inside a tile). A (16 x 16 row-major, q rows): matrices rows 0-7 / 8-15
  // at column 0, then at column 8. B from k (rows = score columns j): rows 0-7 at K offset 0 / 8, then rows 8-15.
  // B from h / v_new stored [k][n] (transposed load): rows 0-7 / 8-15 at column 0, then at column 8.
  const int a_off = (r0 + lane % 16) * ldk + (lane / 16) * 8;
  const int kb_off = ((lane / 16) * 8 + lane % 8) * ldk + ((lane / 8) & 1) * 8;
  const int tb_off = (lane % 8 + ((lane / 8) & 1) * 8) * kLdV + cb + (lane / 16) * 8;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    // the previous item is done with the tiles, gs and chunk
    const FwdOItem it = fwd_o_item<BT>(a, prm, item, units, BV, chunk);
    const gdn::ChunkRef ch = it.ch;
    if (ch.len == 0) continue;
    const int64_t slot = it.slot;
    const int L = ch.len, hk = it.hk, v0 = it.v0, hv_begin = it.hv_begin, hv_end = it.hv_end;
    const int vcols = static_cast<int>(min(static_cast<int64_t>(BV), V - v0));
    const int64_t hslot = gdn::state_slot(a.geo, slot, ch);
    auto load_h_v = [&](int hv) {  // h and v_new of value head hv, one cp.async group
      const int64_t hoff = state_offset(a.h, ch.batch, hslot, hv, HV, KV) + v0;
      gdn::load_tile_rows<1>(hs, kLdV, kp, BV, static_cast<const TK*>(a.h.data) + hoff, V, K, vcols,
                             prm.vec & kVecH, kThreads);
      gdn::load_tile<TK, BT, 1>(vs, kLdV, BV,
                                static_cast<const TK*>(a.v_new.data) + gdn::at(a.v_new, ch.batch, ch.t0, hv) + v0,
                                a.v_new.stride_t, L, vcols, prm.vec & kVecV, kThreads);
      cp_async_commit();
    };

    // group 0: q, k; group 1: h, v_new of the first value head (the scores only wait for group 0)
    gdn::load_tile<TK, BT, 1>(qs, ldk, kp, static_cast<const TK*>(a.q.data) + gdn::at(a.q, ch.batch, ch.t0, hk),
                              a.q.stride_t, L, K, prm.vec & kVecQ, kThreads);
    gdn::load_tile<TK, BT, 1>(ks, ldk, kp, static_cast<const TK*>(a.k.data) + gdn::at(a.k, ch.batch, ch.t0, hk),
                              a.k.stride_t, L, K, prm.vec & kVecK, kThreads);
    cp_async_commit();
    load_h_v(hv_begin);
    cp_async_wait<1>();
    __syncthreads();

    // q k^T once for the key head (fp32 accumulators; the gating below differs per value head)
    const bool active = r0 < L;  // warp-uniform: the warp's rows hold chunk rows
    float sk[kST][4];
#pragma unroll
    for (int t = 0; t < kST; ++t) sk[t][0] = sk[t][1] = sk[t][2] = sk[t][3] = 0.f;
    if (active) {
#pragma unroll 2
      for (int kk = 0; kk < kp; kk += 16) {
        uint32_t af[4];
        ldmatrix_x4(af, qs + a_off + kk);
#pragma unroll
        for (int jp = 0; jp < BT / 16; ++jp) {
          if (jp <= rw && 16 * jp < L) {
            uint32_t b[4];
            ldmatrix_x4(b, ks + kb_off + jp * 16 * ldk + kk);
            mma_m16n8k16<TK>(sk[2 * jp], af, b[0], b[1]);
            mma_m16n8k16<TK>(sk[2 * jp + 1], af, b[2], b[3]);
          }
        }
      }
    }

    auto load_gate = [&](int hv) {  // g of row tid < BT (0 past the chunk or without g)
      return gated && tid < L ? static_cast<const float*>(a.g.data)[gdn::at(a.g, ch.batch, ch.t0 + tid, hv)] : 0.f;
    };
    if (tid < BT) gs[tid] = load_gate(hv_begin);
    __syncthreads();
    for (int hv = hv_begin; hv < hv_end; ++hv) {
      const bool next = hv + 1 < hv_end;
      float g_next = 0.f;  // the next value head's gate, in flight behind this one's work
      if (next && tid < BT) g_next = load_gate(hv + 1);
      // P = gated scores, rounded to TK (fewer live registers): the accumulator fragments of score tiles 2 jp and
      // 2 jp + 1 are the A fragment of the 16 x 16 block jp (rows g / g + 8, columns 2 t, 2 t + 1, then + 8)
      uint32_t pk[BT / 16][4];
      {
        const float ga = gs[row_a], gb = gs[row_b];
        float s[kST][4];
#pragma unroll
        for (int t = 0; t < kST; ++t) {
          const int c = 8 * t + 2 * (lane % 4);
          const float g0 = gs[c], g1 = gs[c + 1];
          const bool below = t / 2 <= rw;  // else above the diagonal block: 0
          s[t][0] = below ? gated_score(sk[t][0], row_a, c, L, ga, g0, gated) : 0.f;
          s[t][1] = below ? gated_score(sk[t][1], row_a, c + 1, L, ga, g1, gated) : 0.f;
          s[t][2] = below ? gated_score(sk[t][2], row_b, c, L, gb, g0, gated) : 0.f;
          s[t][3] = below ? gated_score(sk[t][3], row_b, c + 1, L, gb, g1, gated) : 0.f;
        }
#pragma unroll
        for (int jp = 0; jp < BT / 16; ++jp) {
          pk[jp][0] = pack2<TK>(s[2 * jp][0], s[2 * jp][1]);
          pk[jp][1] = pack2<TK>(s[2 * jp][2], s[2 * jp][3]);
          pk[jp][2] = pack2<TK>(s[2 * jp + 1][0], s[2 * jp + 1][1]);
          pk[jp][3] = pack2<TK>(s[2 * jp + 1][2], s[2 * jp + 1][3]);
        }
      }
      cp_async_wait<0>();
      __syncthreads();

      float o[kNT][4];
#pragma unroll
      for (int t = 0; t < kNT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
      if (active) {
#pragma unroll 2
        for (int kk = 0; kk < kp; kk += 16) {  // q h
          uint32_t af[4];
          ldmatrix_x4(af, qs + a_off + kk);
#pragma unroll
          for (int np = 0; np < kNT / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, hs + tb_off + kk * kLdV + np * 16);
            mma_m16n8k16<TK>(o[2 * np], af, b[0], b[1]);
            mma_m16n8k16<TK>(o[2 * np + 1], af, b[2], b[3]);
          }
        }
        if (gated) {
          const float ea = __expf(gs[row_a]), eb = __expf(gs[row_b]);
#pragma unroll
          for (int t = 0; t < kNT; ++t) {
            o[t][0] *= ea;
            o[t][1] *= ea;
            o[t][2] *= eb;
            o[t][3] *= eb;
          }
        }
#pragma unroll
        for (int jp = 0; jp < BT / 16; ++jp) {  // + P v_new
          if (jp <= rw && 16 * jp < L) {
#pragma unroll
            for (int np = 0; np < kNT / 2; ++np) {
              uint32_t b[4];
              ldmatrix_x4_trans(b, vs + tb_off + jp * 16 * kLdV + np * 16);
              mma_m16n8k16<TK>(o[2 * np], pk[jp], b[0], b[1]);
              mma_m16n8k16<TK>(o[2 * np + 1], pk[jp], b[2], b[3]);
            }
          }
        }
      }
      __syncthreads();  // every warp is done with h, v_new and gs of this value head
      if (next) {
        load_h_v(hv + 1);  // in flight while o is stored and the next scores are gated
        if (tid < BT) gs[tid] = g_next;
      }
      if (active) {
        const float sc = a.scale;
        const int64_t oa = gdn::at(a.o, ch.batch, ch.t0 + row_a, hv) + v0, ob = oa + 8 * a.o.stride_t;
        if (native_o && vcols == BV) {  // o in TK, two-element stores, every column of the block
          TK* const op = static_cast<TK*>(a.o.data);
#pragma unroll
          for (int t = 0; t < kNT; ++t) {
            const int c = cb + 8 * t + 2 * (lane % 4);
            if (row_a < L) *reinterpret_cast<uint32_t*>(op + oa + c) = pack2<TK>(sc * o[t][0], sc * o[t][1]);
            if (row_b < L) *reinterpret_cast<uint32_t*>(op + ob + c) = pack2<TK>(sc * o[t][2], sc * o[t][3]);
          }
        } else {
#pragma unroll
          for (int t = 0; t < kNT; ++t) {
            const int c = cb + 8 * t + 2 * (lane % 4);
            if (c >= vcols) continue;
            const bool two = c + 1 < vcols;
            if (row_a < L) store_two(a.o, oa + c, sc * o[t][0], sc * o[t][1], two, pair);
            if (row_b < L) store_two(a.o, ob + c, sc * o[t][2], sc * o[t][3], two, pair);
          }
        }
      }
      if (next) __syncthreads();  // the next gates are in gs
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename TK, int BT, int BV>
void launch_mma(const FwdOArgs& a, int device, cudaStream_t s) {
  FwdOParams prm = fwd_o_params(a, BV, device);
  const int kp = (static_cast<int>(a.geo.K) + 15) & ~15;
  const std::size_t smem = (2 * BT * qk_ld(kp) + (kp + BT) * kLdVFor<BV>) * sizeof(TK);
  if (gdn::rows_16b(a.q, a.geo.K)) prm.vec |= kVecQ;
  if (gdn::rows_16b(a.k, a.geo.K)) prm.vec |= kVecK;
  if (gdn::rows_16b(a.v_new, a.V)) prm.vec |= kVecV;
  if (aligned16(a.h.data) && a.V % 8 == 0) prm.vec |= kVecH;  // h is contiguous: every row starts at a multiple of V
  auto kernel = fwd_o_mma_kernel<TK, BT, BV>;
  allow_smem(kernel, smem, "chunk_fwd_o");
  launch_kernel(kernel, dim3(gdn::grid_x(fwd_o_items(a, prm))), dim3(kThreadsFor<BV>), smem, s, device, a, prm);
}

template <typename TK, int BV>
void launch_mma_bt(const FwdOArgs& a, int device, cudaStream_t s) {
  switch (a.geo.BT) {
    case 16: launch_mma<TK, 16, BV>(a, device, s); break;
    case 32: launch_mma<TK, 32, BV>(a, device, s); break;
    default: launch_mma<TK, 64, BV>(a, device, s); break;  // the chunk size was validated (16, 32, 64)
  }
}

template <typename TK>
void launch_mma_bv(const FwdOArgs& a, int device, cudaStream_t s) {
  if (a.V > 64 && a.geo.K <= 128) {
    launch_mma_bt<TK, 128>(a, device, s);
  } else {
    launch_mma_bt<TK, 64>(a, device, s);
  }
}

}  // namespace

/// q, k, v_new and h are all f16 or all bf16 (chosen by the caller, gdn_fwd_o.cu).
void chunk_fwd_o_mma(const FwdOArgs& a, int device, cudaStream_t s) {
  if (a.q.dtype == DType::bf16) {
    launch_mma_bv<__nv_bfloat16>(a, device, s);
  } else {
    launch_mma_bv<__half>(a, device, s);
  }
}

}  // namespace fuseops::detail::cuda
