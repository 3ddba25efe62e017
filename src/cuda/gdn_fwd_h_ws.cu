// Warp-specialised kernel of the GDN forward's fused-output form (chunk_gated_delta_rule_fwd_h_o; FLA
// `chunk_gated_delta_rule_fwd_h` + `chunk_fwd_o`, docs/ops/gdn-log.md "The warp-specialised fused-output kernel").
//
// One block per (sequence, value head, 64 columns of V), 384 threads in three roles:
// - warpgroup 0 (warps 0-3), the chain: the state slice S^T [64 columns][K = 128] stays in its fp32 accumulators
//   (warp w: columns 16 w .. 16 w + 15 of the slice as accumulator rows). Per chunk: S^T rounded into A fragments;
//   v_new^T = u^T - S^T w^T (wgmma, A from registers, B = the w tile as the tensor map left it); the gated v_new^T
//   rounded into A fragments; S^T = exp(g_last) S^T + (v_new^T exp(g_last - g_j)) k (wgmma, A from registers, B = the
//   k tile, N-major). Nothing of the chain passes through shared memory or a block barrier. Beside it, the chunk's
//   S^T (at the chunk's start) and its ungated v_new^T go by stmatrix into one of two hand-off slots.
// - warpgroup 1 (warps 4-7), the output: P = q k^T (its 64 x 64 scores), O = q S from the hand-off slot, P gated and
//   masked into A fragments, O = exp(g_i) O + P v_new, o = scale O stored, rows < L. The same products, roundings and
//   order of sums as the fwd_h_mma kernel's fused-output variant.
// - warp 8, the producer: per chunk, the gate table (exp(g_last - g_i), g_i, exp(g_last), L; g copied into shared
//   memory by cp.async one chunk ahead) and the w, k, q, u tiles (128-byte-swizzled boxes of 64 columns:
//   tensor-map copies for whole chunks; 16-byte loads, zero past the chunk, for a sequence's last partial chunk), three
//   buffers ahead. Warps 9-11 leave; setmaxnreg gives registers 240 / 168 / 80 to the three warpgroups.
// The step is bound by the tiles' arrival, not by the chain (docs/ops/gdn-log.md, ncu source counters at 2/8 [8 x 1024]).
// Synchronisation by mbarriers only: full / empty per tile buffer, full / empty per hand-off slot. The roles walk the
// same units and chunks in the same order, so one chunk counter gives every buffer's and slot's phase.
#include "cuda/gdn_fwd_h_ws.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/env.h"
#include "cuda/bulk_copy.cuh"
#include "cuda/device_error.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_fwd_o.cuh"
#include "cuda/mma.cuh"
#include "cuda/tensor_map.h"
#include "cuda/wgmma.cuh"

namespace fuseops::detail::cuda {
namespace {

constexpr int kWsThreads = 384;  ///< three warpgroups (the third's warps 9-11 leave at once)
constexpr int kWsNs = 3;         ///< tile buffers
constexpr int kBox = 64 * 128;   ///< one swizzled box: 64 rows of 64 16-bit elements
/// A tile buffer: w (two boxes: K columns 0-63, 64-127), k (two), q (two), u (one: the block's 64 columns)
constexpr int kBufW = 0, kBufK = 2 * kBox, kBufQ = 4 * kBox, kBufU = 6 * kBox, kBufBytes = 7 * kBox;
/// A hand-off slot: S^T (two boxes, K-major: [64 columns][K]) and the ungated v_new^T (one box: [64 columns][64 rows])
constexpr int kXOff = kWsNs * kBufBytes, kXSt = 0, kXVn = 2 * kBox, kXBytes = 3 * kBox;

/// The gates of one chunk (written by the producer, read by both warpgroups).
struct ChunkGates {
  float fg[64];    ///< exp(g_last - g_i), 0 past the chunk (1 without g)
  float graw[64];  ///< g_i, 0 past the chunk and without g
  float decay;     ///< exp(g_last) (1 without g)
  int len;         ///< L, the chunk's rows
  float pad[2];
};
constexpr int kGateOff = kXOff + 2 * kXBytes;
constexpr int kBarOff = kGateOff + kWsNs * static_cast<int>(sizeof(ChunkGates));
/// mbarriers: full[kWsNs], empty[kWsNs], xfull[2], xempty[2]
constexpr int kStageOff = kBarOff + (2 * kWsNs + 4) * static_cast<int>(sizeof(uint64_t));
/// The producer's g staging: two slots of a chunk's g_i (64) and g_last, copied one chunk ahead (1-3 chunks measured
/// the same)
constexpr int kStageLd = 68;
constexpr std::size_t kWsSmem = kStageOff + 2 * kStageLd * sizeof(float);
static_assert(kGateOff % 1024 == 0 && kBarOff % 8 == 0 && kStageOff % 16 == 0 && kWsSmem <= 227 * 1024,
              "shared memory layout");

/// Arrival counts: the producer warp's lanes; every thread of the two warpgroups; one warpgroup.
constexpr uint32_t kFullCount = 32, kEmptyCount = 256, kXCount = 128;

/// Raises (inc) or lowers (dec) this warpgroup's register budget (every warp of the warpgroup executes it).
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}

/// Keeps A-fragment registers alive (unchanged) up to this point: after the wait of the wgmma that read them.
template <int R>
__device__ __forceinline__ void keep_regs(uint32_t (&r)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
  }
}

/// The A fragment of k-step s (columns 16 s .. 16 s + 15) of a 64-row accumulator block d (m64n64 layout, columns
/// 8 j + 2 (lane % 4) + {0, 1} of rows lane / 4 (+ 8) in d[4 j ..]), rounded to TK.
template <typename TK>
__device__ __forceinline__ void a_frag(uint32_t (&a)[4], const float* d, int s) {
  const int j = 2 * s;
  a[0] = pack2<TK>(d[4 * j + 0], d[4 * j + 1]);
  a[1] = pack2<TK>(d[4 * j + 2], d[4 * j + 3]);
  a[2] = pack2<TK>(d[4 * j + 4], d[4 * j + 5]);
  a[3] = pack2<TK>(d[4 * j + 6], d[4 * j + 7]);
}

/// f(state row, slice column, element) for each of this thread's S^T accumulator elements: element 4 j + e of half h
/// is state row 64 h + 8 j + qc + (e & 1), slice column r0 + 8 (e >> 1).
template <typename F>
__device__ __forceinline__ void for_each_state_t(float (&st)[2][32], int r0, int qc, F&& f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(64 * h + 8 * j + qc + (e & 1), r0 + 8 * (e >> 1), st[h][4 * j + e]);
    }
  }
}

/// S^T := h0 (K-major rows of the unit's state: element (row, col) at h0[row V + col]).
template <typename TP>
__device__ __forceinline__ void load_state_t(float (&st)[2][32], const TP* h0, int64_t V, int r0, int qc) {
  for_each_state_t(st, r0, qc, [&](int row, int col, float& x) { x = static_cast<float>(h0[row * V + col]); });
}

/// A unit of the grid: (sequence n, value head hv, 64-column block vb), its key head, first column, bounds, chunks.
struct WsUnit {
  int64_t vb, hv, n, hk, col0, chunks;
  SeqBounds sb;
};
__device__ __forceinline__ WsUnit ws_unit(const FwdHArgs& a, int64_t unit, int64_t vblocks) {
  WsUnit u;
  const int64_t nh = unit / vblocks;
  u.vb = unit % vblocks;
  u.hv = nh % a.geo.HV;
  u.n = nh / a.geo.HV;
  u.hk = u.hv / (a.geo.HV / a.geo.H);
  u.col0 = u.vb * 64;
  u.sb = sequence_bounds(a.geo, u.n);
  u.chunks = (u.sb.eos - u.sb.bos + 63) / 64;
  return u;
}

/// Before the wait for the kernel launched before it (PDL), while that kernel's last blocks run: hints for the L2 to
/// fetch what this block's first unit reads first and the intra kernel does not write: its slice of h0 (the chain
/// warpgroup, one state row per thread) and its first chunk's q and k boxes and g elements (the producer warp). Hints
/// only: nothing is read into the SM, so a value written before the wait is still read as written. The unit's bounds
/// read cu_seqlens, an input of the forward that every kernel before this one has finished writing (the intra kernel
/// waits for the prologue, which waits for the kernel before the forward). Measured 0.985x the forward's time at 2/8
/// [8 x 1024] on an H100, 0.992-0.996x on the other cases of this kernel (docs/ops/gdn-log.md, fifty-ninth session).
__device__ __forceinline__ void prefetch_first_unit(const FwdHArgs& a, int64_t vblocks, int64_t units, int warp,
                                                    int lane, const CUtensorMap* map_k, const CUtensorMap* map_q) {
  if (blockIdx.x >= units || !(warp < 4 || warp == 8)) return;
  const WsUnit u = ws_unit(a, blockIdx.x, vblocks);
  if (u.chunks <= 0) return;
  if (warp < 4) {
    if (a.h0 == nullptr) return;
    const int64_t es = a.h0_dtype == DType::f32 ? 4 : 2;  // f32, bf16 or f16 (load_state_t)
    const char* const row = static_cast<const char*>(a.h0) +
                            es * (((u.n * a.geo.HV + u.hv) * 128 + 32 * warp + lane) * a.V + u.col0);
    for (int64_t c = 0; c < 64 * es; c += 128) prefetch_l2(row + c);
    return;
  }
  const int64_t t0 = u.sb.bos;
  if (lane == 0 && u.sb.eos - t0 >= 64) {
    const int hk = static_cast<int>(u.hk), tq = static_cast<int>(t0), bt = static_cast<int>(u.sb.batch);
    for (int box = 0; box < 2; ++box) {
      tma_prefetch_4d(map_k, 64 * box, hk, tq, bt);
      tma_prefetch_4d(map_q, 64 * box, hk, tq, bt);
    }
  }
  if (a.g.data != nullptr) {
    for (int r = lane; r < 64 && t0 + r < u.sb.eos; r += 32) {
      prefetch_l2(static_cast<const float*>(a.g.data) + gdn::at(a.g, u.sb.batch, t0 + r, u.hv));
    }
  }
}

template <typename TK>
__global__ void __launch_bounds__(kWsThreads, 1)
    fwd_h_o_ws_kernel(const FwdHArgs a, int64_t vblocks, int64_t units, DeviceErrorRecord* errors,
                      const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_u) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  // the warp index through a shuffle: provably uniform across the warp, so that ptxas sees the roles' branches as
  // non-divergent (otherwise it serialises the wgmma inside them, C7520)
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  prefetch_first_unit(a, vblocks, units, warp, lane, &map_k, &map_q);
  pdl_wait_and_release();
  const uint32_t smem0 = smem_addr(smem_raw);
  if ((smem0 & 1023u) != 0) __trap();  // the swizzled boxes need 1024-byte alignment (never expected to fire)
  ChunkGates* const gates = reinterpret_cast<ChunkGates*>(smem_raw + kGateOff);
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem_raw + kBarOff);
  uint64_t* const empty = full + kWsNs;
  uint64_t* const xfull = empty + kWsNs;
  uint64_t* const xempty = xfull + 2;
  if (tid == 0) {
    for (int b = 0; b < kWsNs; ++b) {
      mbar_init(full + b, kFullCount);
      mbar_init(empty + b, kEmptyCount);
    }
    for (int x = 0; x < 2; ++x) {
      mbar_init(xfull + x, kXCount);
      mbar_init(xempty + x, kXCount);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int64_t HV = a.geo.HV, V = a.V, KV = 128 * V;
  const bool gated = a.g.data != nullptr;
  const int qr = lane / 4, qc = 2 * (lane % 4);
  // Each role walks the units in the same order; `it` counts the chunks walked so far (buffer it % 3, slot it % 2).
  int64_t it = 0;
  const int wg = warp / 4;
  if (wg == 2) {
    // ---------------------------------------------------------------- producer (warp 8)
    setmaxnreg_dec<80>();
    if (warp == 8) {
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WsUnit u = ws_unit(a, unit, vblocks);
      const int64_t hv = u.hv, hk = u.hk, col0 = u.col0, chunks = u.chunks;
      const SeqBounds& sb = u.sb;
      const float* const gp = static_cast<const float*>(a.g.data);
      float* const gst = reinterpret_cast<float*>(smem_raw + kStageOff);
      // chunk c's g_i and g_last copied (cp.async) into staging slot c % 2, one chunk ahead of its use; one group per
      // chunk, empty past the unit's chunks (the g loads' latency measured on the copies' path: 1.2-2% of the forward)
      auto stage_g = [&](int64_t c) {
        if (gated && c < chunks) {
          const int64_t t0 = sb.bos + 64 * c;
          const int L = static_cast<int>(min(int64_t{64}, sb.eos - t0));
          float* const slot = gst + static_cast<int>(c & 1) * kStageLd;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = lane + 32 * h;
            if (r < L) cp_async_ca<4>(slot + r, gp + gdn::at(a.g, sb.batch, t0 + r, hv));
          }
          if (lane == 0) cp_async_ca<4>(slot + 64, gp + gdn::at(a.g, sb.batch, t0 + L - 1, hv));
        }
        cp_async_commit();
      };
      stage_g(0);
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i = it + c, t0 = sb.bos + 64 * c;
        const int b = static_cast<int>(i % kWsNs);
        const int L = static_cast<int>(min(int64_t{64}, sb.eos - t0));
        __syncwarp();  // every lane has read the slot that chunk c + 1 reuses (chunk c - 1's)
        stage_g(c + 1);
        cp_async_wait<1>();
        __syncwarp();  // lane 0's g_last visible to the warp
        const float* const slot = gst + static_cast<int>(c & 1) * kStageLd;
        const float gl = gated ? slot[64] : 0.f;
        float gi[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = lane + 32 * h;
          gi[h] = gated && r < L ? slot[r] : 0.f;
        }
        mbar_wait(empty + b, static_cast<uint32_t>((i / kWsNs) & 1) ^ 1u);
        ChunkGates& G = gates[b];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = lane + 32 * h;
          G.fg[r] = r < L ? (gated ? expf(gl - gi[h]) : 1.f) : 0.f;
          G.graw[r] = gi[h];
        }
        if (lane == 0) {
          G.decay = gated ? expf(gl) : 1.f;
          G.len = L;
        }
        const uint32_t buf = smem0 + static_cast<uint32_t>(b * kBufBytes);
        if (L == 64) {
          if (lane == 0) {
            mbar_arrive_expect(full + b, kBufBytes);
            const int tq = static_cast<int>(t0), bt = static_cast<int>(sb.batch);
            for (int box = 0; box < 2; ++box) {
              tma_load_4d(buf + kBufW + box * kBox, &map_w, 64 * box, static_cast<int>(hv), tq, bt, full + b);
              tma_load_4d(buf + kBufK + box * kBox, &map_k, 64 * box, static_cast<int>(hk), tq, bt, full + b);
              tma_load_4d(buf + kBufQ + box * kBox, &map_q, 64 * box, static_cast<int>(hk), tq, bt, full + b);
            }
            tma_load_4d(buf + kBufU, &map_u, static_cast<int>(col0), static_cast<int>(hv), tq, bt, full + b);
          } else {
            mbar_arrive(full + b);
          }
        } else {
          // a last partial chunk: rows < L from memory, zero past them (the next sequence's rows must not enter)
          const TK* const wr = static_cast<const TK*>(a.w.data) + gdn::at(a.w, sb.batch, t0, hv);
          const TK* const kr = static_cast<const TK*>(a.k.data) + gdn::at(a.k, sb.batch, t0, hk);
          const TK* const qr_ = static_cast<const TK*>(a.q.data) + gdn::at(a.q, sb.batch, t0, hk);
          const TK* const ur = static_cast<const TK*>(a.u.data) + gdn::at(a.u, sb.batch, t0, hv) + col0;
          auto put = [&](uint32_t tile, const TK* src, int64_t stride, int r, int c16) {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < L) v = *reinterpret_cast<const uint4*>(src + r * stride + 8 * c16);
            const uint32_t dst = tile + static_cast<uint32_t>((c16 >> 3) * kBox + r * 128 + (((c16 & 7) ^ (r & 7)) << 4));
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z),
                         "r"(v.w)
                         : "memory");
          };
          for (int e = lane; e < 64 * 16; e += 32) {
            const int r = e / 16, c16 = e % 16;
            put(buf + kBufW, wr, a.w.stride_t, r, c16);
            put(buf + kBufK, kr, a.k.stride_t, r, c16);
            put(buf + kBufQ, qr_, a.q.stride_t, r, c16);
          }
          for (int e = lane; e < 64 * 8; e += 32) put(buf + kBufU, ur, a.u.stride_t, e / 8, e % 8);
          fence_proxy_async_shared();  // read by wgmma (the asynchronous proxy)
          mbar_arrive(full + b);
        }
      }
      it += chunks;
    }
    }
  } else if (wg == 0) {
    // ---------------------------------------------------------------- the chain (warpgroup 0)
    setmaxnreg_inc<240>();
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WsUnit u = ws_unit(a, unit, vblocks);
      const int64_t hv = u.hv, n = u.n, col0 = u.col0, chunks = u.chunks;
      const SeqBounds& sb = u.sb;
      if (sb.bad && hv == 0 && u.vb == 0 && tid == 0) record_device_error(errors, a.geo.cu_site, n);
      const int r0 = 16 * warp + qr;  // this thread's slice columns r0, r0 + 8 (accumulator rows)
      float st[2][32];                // S^T: state rows 64 h + 8 j + qc + {0, 1} in st[h][4 j ..]
      const int64_t base = (n * HV + hv) * KV + col0;
      if (a.h0 != nullptr) {
        switch (a.h0_dtype) {
          case DType::bf16: load_state_t(st, static_cast<const __nv_bfloat16*>(a.h0) + base, V, r0, qc); break;
          case DType::f16: load_state_t(st, static_cast<const __half*>(a.h0) + base, V, r0, qc); break;
          default: load_state_t(st, static_cast<const float*>(a.h0) + base, V, r0, qc); break;
        }
      } else {
#pragma unroll
        for (int e = 0; e < 32; ++e) st[0][e] = st[1][e] = 0.f;
      }
      const int q = lane >> 3, i8 = lane & 7;
      const int vrow = 16 * warp + 8 * (q & 1) + i8;  // stmatrix: the row this lane addresses
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i = it + c;
        const int b = static_cast<int>(i % kWsNs), x = static_cast<int>(i & 1);
        const uint32_t buf = smem0 + static_cast<uint32_t>(b * kBufBytes);
        const uint32_t slot = smem0 + static_cast<uint32_t>(kXOff + x * kXBytes);
        mbar_wait(full + b, static_cast<uint32_t>((i / kWsNs) & 1));
        // v_new^T = S^T w^T: A = S^T rounded (8 k-steps over the state rows), B = the w tile (N = the chunk's rows)
        uint32_t sa[8][4];
#pragma unroll
        for (int s = 0; s < 8; ++s) a_frag<TK>(sa[s], st[s >> 2], s & 3);
        float vacc[32];
        wgmma_fence();
        const uint64_t wdesc = wgmma_desc_sw128(buf + kBufW);
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          wgmma_rs<TK, 64>(vacc, sa[s], wgmma_desc_add(wdesc, static_cast<uint32_t>((s >> 2) * kBox + (s & 3) * 32)),
                           s > 0);
        }
        wgmma_commit();
        // beside it: S^T into the hand-off slot (free once the output warpgroup is done with chunk i - 2)
        mbar_wait(xempty + x, static_cast<uint32_t>((i >> 1) & 1) ^ 1u);
        // (rounded again from st: the A registers of a wgmma in flight are not to be accessed before its wait)
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const int grp = 2 * (s & 3) + (q >> 1);
          uint32_t f[4];
          a_frag<TK>(f, st[s >> 2], s & 3);
          stmatrix_x4<false>(slot + kXSt + static_cast<uint32_t>((s >> 2) * kBox + vrow * 128 + ((grp ^ i8) << 4)),
                             f[0], f[1], f[2], f[3]);
        }
        // u^T at the accumulator layout of v_new^T (ldmatrix.trans of the u tile [rows][columns]): matrix (j, hh) =
        // chunk rows 8 j .., slice columns 16 warp + 8 hh ..; lane l addresses row l % 8 of matrix l / 8
        uint32_t uf[16];
#pragma unroll
        for (int m4 = 0; m4 < 4; ++m4) {
          const int mat = 4 * m4 + q, j = mat >> 1, hh = mat & 1;
          const int row = 8 * j + i8;
          const uint32_t addr = buf + kBufU + static_cast<uint32_t>(row * 128 + (((2 * warp + hh) ^ i8) << 4));
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(uf[4 * m4 + 0]), "=r"(uf[4 * m4 + 1]), "=r"(uf[4 * m4 + 2]), "=r"(uf[4 * m4 + 3])
                       : "r"(addr));
        }
        const ChunkGates& G = gates[b];
        float2 fg[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) fg[j] = *reinterpret_cast<const float2*>(G.fg + 8 * j + qc);
        // S^T decays while w S runs (its A operand is the rounded copy in sa)
        const float decay = G.decay;
#pragma unroll
        for (int e = 0; e < 32; ++e) {
          st[0][e] *= decay;
          st[1][e] *= decay;
        }
        wgmma_wait<0>();
        wgmma_fence_operands(vacc);
        keep_regs(sa);
        // v_new^T = u^T - acc (element 4 j + 2 hh + e: slice column r0 + 8 hh, chunk row 8 j + qc + e); the matrix of
        // register 4 m4 + t is (j, hh) = ((4 m4 + t) / 2, (4 m4 + t) % 2)
        float vn[32];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float2 u2 = unpack2<TK>(uf[2 * j + hh]);
            vn[4 * j + 2 * hh + 0] = u2.x - vacc[4 * j + 2 * hh + 0];
            vn[4 * j + 2 * hh + 1] = u2.y - vacc[4 * j + 2 * hh + 1];
          }
        }
        // the gated v_new^T as A fragments (4 k-steps over the chunk's rows)
        uint32_t va[4][4];
#pragma unroll
        for (int s = 0; s < 4; ++s) {
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            const int j = 2 * s + t;
            va[s][2 * t + 0] = pack2<TK>(vn[4 * j + 0] * fg[j].x, vn[4 * j + 1] * fg[j].y);
            va[s][2 * t + 1] = pack2<TK>(vn[4 * j + 2] * fg[j].x, vn[4 * j + 3] * fg[j].y);
          }
        }
        // S^T += v_gated^T k: B = the k tile (K = the chunk's rows, N = state rows: N-major), one box per half
        wgmma_fence_operands(st[0]);
        wgmma_fence_operands(st[1]);
        wgmma_fence();
        const uint64_t kd0 = wgmma_desc_sw128_mn(buf + kBufK, 1024), kd1 = wgmma_desc_sw128_mn(buf + kBufK + kBox, 1024);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          wgmma_rs<TK, 64, true>(st[0], va[s], wgmma_desc_add(kd0, static_cast<uint32_t>(s * 2048)), 1);
          wgmma_rs<TK, 64, true>(st[1], va[s], wgmma_desc_add(kd1, static_cast<uint32_t>(s * 2048)), 1);
        }
        wgmma_commit();
        // beside it: the ungated v_new^T (rounded as fwd_h stores v_new) into the slot, then handed off
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const int j = 2 * s, grp = 2 * s + (q >> 1);
          stmatrix_x4<false>(slot + kXVn + static_cast<uint32_t>(vrow * 128 + ((grp ^ i8) << 4)),
                             pack2<TK>(vn[4 * j + 0], vn[4 * j + 1]), pack2<TK>(vn[4 * j + 2], vn[4 * j + 3]),
                             pack2<TK>(vn[4 * j + 4], vn[4 * j + 5]), pack2<TK>(vn[4 * j + 6], vn[4 * j + 7]));
        }
        fence_proxy_async_shared();  // read by the output warpgroup's wgmma
        mbar_arrive(xfull + x);
        wgmma_wait<0>();
        wgmma_fence_operands(st[0]);
        wgmma_fence_operands(st[1]);
        keep_regs(va);
        mbar_arrive(empty + b);
      }
      if (a.ht) {
        float* const ht = a.ht + (n * HV + hv) * KV + col0;
        for_each_state_t(st, r0, qc, [&](int row, int col, float& x) { ht[row * V + col] = x; });
      }
      it += chunks;
    }
  } else {
    // ---------------------------------------------------------------- the output (warpgroup 1)
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WsUnit u = ws_unit(a, unit, vblocks);
      const int64_t hv = u.hv, col0 = u.col0, chunks = u.chunks;
      const SeqBounds& sb = u.sb;
      const int w1 = warp - 4;
      const int ra = 16 * w1 + qr, rb = ra + 8;  // this thread's chunk rows
      TK* const op = static_cast<TK*>(a.o.data);
      const float sc = a.scale;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i = it + c, t0 = sb.bos + 64 * c;
        const int b = static_cast<int>(i % kWsNs), x = static_cast<int>(i & 1);
        const uint32_t buf = smem0 + static_cast<uint32_t>(b * kBufBytes);
        const uint32_t slot = smem0 + static_cast<uint32_t>(kXOff + x * kXBytes);
        mbar_wait(full + b, static_cast<uint32_t>((i / kWsNs) & 1));
        const uint64_t qdesc = wgmma_desc_sw128(buf + kBufQ), kdesc = wgmma_desc_sw128(buf + kBufK);
        // pacc zeroed (step 0 overwrites it): otherwise the loop's copies of the undefined registers made ptxas wait
        // for the first k-step before issuing the others (C7517)
        float pacc[32], oacc[32];
#pragma unroll
        for (int e = 0; e < 32; ++e) pacc[e] = 0.f;
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const uint32_t ko = static_cast<uint32_t>((s >> 2) * kBox + (s & 3) * 32);
          wgmma_ss<TK, 64>(pacc, wgmma_desc_add(qdesc, ko), wgmma_desc_add(kdesc, ko), s > 0);
        }
        wgmma_commit();
        mbar_wait(xfull + x, static_cast<uint32_t>((i >> 1) & 1));
        wgmma_fence();
        const uint64_t sdesc = wgmma_desc_sw128(slot + kXSt);
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const uint32_t ko = static_cast<uint32_t>((s >> 2) * kBox + (s & 3) * 32);
          wgmma_ss<TK, 64>(oacc, wgmma_desc_add(qdesc, ko), wgmma_desc_add(sdesc, ko), s > 0);
        }
        wgmma_commit();
        const ChunkGates& G = gates[b];
        const int L = G.len;
        const float ga = G.graw[ra], gb = G.graw[rb];
        float2 gcol[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) gcol[t] = *reinterpret_cast<const float2*>(G.graw + 8 * t + qc);
        wgmma_wait<1>();
        wgmma_fence_operands(pacc);
        // P = (q k^T) exp(g_i - g_j) for j <= i < L, else 0, rounded into A fragments (4 k-steps over the columns)
        uint32_t pa[4][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int cj = 8 * t + qc;
          pacc[4 * t + 0] = fwd_o::gated_score(pacc[4 * t + 0], ra, cj, L, ga, gcol[t].x, gated);
          pacc[4 * t + 1] = fwd_o::gated_score(pacc[4 * t + 1], ra, cj + 1, L, ga, gcol[t].y, gated);
          pacc[4 * t + 2] = fwd_o::gated_score(pacc[4 * t + 2], rb, cj, L, gb, gcol[t].x, gated);
          pacc[4 * t + 3] = fwd_o::gated_score(pacc[4 * t + 3], rb, cj + 1, L, gb, gcol[t].y, gated);
        }
#pragma unroll
        for (int s = 0; s < 4; ++s) a_frag<TK>(pa[s], pacc, s);
        wgmma_wait<0>();
        wgmma_fence_operands(oacc);
        const float ea = gated ? __expf(ga) : 1.f, eb = gated ? __expf(gb) : 1.f;
        fwd_o::scale_rows(oacc, ea, eb);
        wgmma_fence_operands(oacc);
        wgmma_fence();
        const uint64_t vdesc = wgmma_desc_sw128(slot + kXVn);
#pragma unroll
        for (int s = 0; s < 4; ++s) wgmma_rs<TK, 64>(oacc, pa[s], wgmma_desc_add(vdesc, static_cast<uint32_t>(s * 32)), 1);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(oacc);
        keep_regs(pa);
        mbar_arrive(empty + b);
        mbar_arrive(xempty + x);
        // o = scale O, rows < L, pair stores
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = hr ? rb : ra;
          if (r < L) {
            TK* const orow = op + gdn::at(a.o, sb.batch, t0 + r, hv) + col0 + qc;
#pragma unroll
            for (int t = 0; t < 8; ++t) {
              *reinterpret_cast<uint32_t*>(orow + 8 * t) =
                  pack2<TK>(sc * oacc[4 * t + 2 * hr], sc * oacc[4 * t + 2 * hr + 1]);
            }
          }
        }
      }
      it += chunks;
    }
  }
}

std::atomic<bool> ws_off_for_testing{false};
std::atomic<int64_t> ws_launches{0};

}  // namespace

bool fwd_h_o_ws_switched_on() {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_FWD_HO_WS");
  return allowed && !ws_off_for_testing.load(std::memory_order_relaxed);
}
void set_fwd_h_o_ws_off_for_testing(bool off) { ws_off_for_testing.store(off, std::memory_order_relaxed); }
int64_t fwd_h_o_ws_launches_for_testing() { return ws_launches.load(std::memory_order_relaxed); }

bool launch_fwd_h_o_ws(const FwdHArgs& a, const CUtensorMap& w, const CUtensorMap& k, const CUtensorMap& q,
                       int device, cudaStream_t s) {
  const DType dt = a.k.dtype;
  CUtensorMap u{};
  if (!gdn::rows_16b(a.u, a.V) || !gdn_rows_map(&u, a.u, dt, a.V, a.geo.HV, a.geo)) return false;
  const int64_t vblocks = a.V / 64, units = a.geo.N * a.geo.HV * vblocks;
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  const char* op = "chunk_gated_delta_rule";
  const bool launched = gdn::with_16bit(dt, [&](auto tag) {
    using TK = decltype(tag);
    auto kernel = fwd_h_o_ws_kernel<TK>;
    allow_smem(kernel, kWsSmem, op);
    launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kWsThreads), kWsSmem, s, device, a, vblocks, units, errors,
                  w, k, q, u);
  });
  if (launched) ws_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

}  // namespace fuseops::detail::cuda
