// CUDA backend of chunk_gated_delta_rule_fwd_h: the state recurrence across chunks (include/fuseops/gdn_forward.h;
// reference/gdn.md §7). Two kernels, both one block per (sequence, value head, block of V columns), sequential over
// the sequence's chunks (the blocks of one (sequence, head) split V for parallelism). Per chunk:
//   1. h[slot] = S (rounded to h's dtype);
//   2. v_new = u - w S (stored ungated);
//   3. S = exp(g_last) S + k^T (v_new * exp(g_last - g_i)).
//
// fwd_h_mma_kernel (k, w, u, h, v_new all f16 or all bf16; every K, V in [1, 256] and every chunk size): tensor cores.
// The state slice S [KP][BV] (K padded to KP = 128 or 256) stays in fp32 mma accumulators; warp w owns rows
// [w KP / 8, (w + 1) KP / 8). Per chunk S is rounded once into shared memory, where it is both h[slot] (written out
// with 16-byte stores) and the B operand of w S; the gated v_new is rounded into a second tile as the B operand of
// k^T v_new (k^T through ldmatrix.trans). The next chunk's w, k, u tiles are prefetched with cp.async into the second
// of two buffers while the current chunk is computed; two block barriers per chunk. Tiles are zero past K, V and the
// chunk's rows.
//
// fwd_h_ffma_kernel (f32 inputs and any mix of dtypes): S [K][32] in shared memory, fp32 FFMA (no TF32); thread
// (rg = tid / 32, c = tid % 32) owns column c and the rows rg, rg + 8, ... of S and of the chunk.
// All sums run in a fixed order: results do not depend on the batch around a sequence.
#include <cstdint>

#include "cuda/device_error.cuh"
#include "cuda/gdn_forward.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;
constexpr int kBV = 32;
constexpr int kRowGroups = kThreads / kBV;  // 8

template <int BT>
__global__ void __launch_bounds__(kThreads) fwd_h_ffma_kernel(const FwdHArgs a, int64_t vblocks, int64_t units,
                                                         DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ float smem[];
  const int K = static_cast<int>(a.geo.K);
  float* S = smem;                 // [K][kBV]
  float* ws = S + K * kBV;         // [BT][K]
  float* ks = ws + BT * K;         // [BT][K]
  float* vn = ks + BT * K;         // [BT][kBV]
  __shared__ float gs[BT];
  const int tid = static_cast<int>(threadIdx.x), c = tid % kBV, rg = tid / kBV;
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V, group = HV / a.geo.H;

  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t vb = unit % vblocks, nh = unit / vblocks, hv = nh % HV, n = nh / HV, hk = hv / group;
    const int64_t col = vb * kBV + c;
    const bool col_ok = col < V;
    const SeqBounds sb = sequence_bounds(a.geo, n);
    if (sb.bad && hv == 0 && vb == 0 && tid == 0) record_device_error(errors, a.geo.cu_site, n);
    const int64_t state0 = (n * HV + hv) * KV;
    __syncthreads();  // the previous unit is done with S
    for (int r = rg; r < K; r += kRowGroups) {
      S[r * kBV + c] = (a.h0 && col_ok) ? gdn::load_f(a.h0, a.h0_dtype, state0 + r * V + col) : 0.f;
    }
    for (int64_t t0 = sb.bos; t0 < sb.eos; t0 += BT) {
      const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0));
      const int64_t hoff = state_offset(a.h, sb.batch, chunk_slot(a.geo, n, sb.bos, t0), hv, HV, KV);
      __syncthreads();  // the previous chunk is done with the staged rows
      if (col_ok) {
        for (int r = rg; r < K; r += kRowGroups) gdn::store_f(a.h.data, a.h.dtype, hoff + r * V + col, S[r * kBV + c]);
      }
      for (int e = tid; e < L * K; e += kThreads) {
        const int i = e / K, x = e % K;
        ws[e] = gdn::load_f(a.w.data, a.w.dtype, gdn::at(a.w, sb.batch, t0 + i, hv) + x);
        ks[e] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, sb.batch, t0 + i, hk) + x);
      }
      for (int i = rg; i < L; i += kRowGroups) {
        vn[i * kBV + c] = col_ok ? gdn::load_f(a.u.data, a.u.dtype, gdn::at(a.u, sb.batch, t0 + i, hv) + col) : 0.f;
      }
      if (tid < L) gs[tid] = a.g.data ? static_cast<const float*>(a.g.data)[gdn::at(a.g, sb.batch, t0 + tid, hv)] : 0.f;
      __syncthreads();
      const float glast = gs[L - 1];
      for (int i = rg; i < L; i += kRowGroups) {
        float d = 0.f;
        for (int r = 0; r < K; ++r) d = fmaf(ws[i * K + r], S[r * kBV + c], d);
        const float v = vn[i * kBV + c] - d;
        if (col_ok) gdn::store_f(a.v_new.data, a.v_new.dtype, gdn::at(a.v_new, sb.batch, t0 + i, hv) + col, v);
        vn[i * kBV + c] = a.g.data ? v * expf(glast - gs[i]) : v;
      }
      __syncthreads();
      const float decay = a.g.data ? expf(glast) : 1.f;
      for (int r = rg; r < K; r += kRowGroups) {
        float acc = S[r * kBV + c] * decay;
        for (int i = 0; i < L; ++i) acc = fmaf(ks[i * K + r], vn[i * kBV + c], acc);
        S[r * kBV + c] = acc;
      }
    }
    if (a.ht && col_ok) {
      for (int r = rg; r < K; r += kRowGroups) a.ht[state0 + r * V + col] = S[r * kBV + c];
    }
  }
}

template <int BT>
void launch_fwd_h_ffma(const FwdHArgs& a, int device, cudaStream_t s) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  const int64_t vblocks = (a.V + kBV - 1) / kBV;
  const int64_t units = a.geo.N * a.geo.HV * vblocks;
  const std::size_t smem =
      (static_cast<std::size_t>(a.geo.K) * kBV + 2 * static_cast<std::size_t>(BT) * a.geo.K + BT * kBV) * sizeof(float);
  auto kernel = fwd_h_ffma_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kThreads), smem, s, device, a, vblocks, units, errors);
}


// ---------------------------------------------------------------------------------------------------------------
// Tensor-core kernel (f16 / bf16)

/// Which tensors move as 16-byte rows (cp.async / vector stores) and whether v_new takes 4-byte pair stores.
struct FwdHVec {
  bool w, k, u, h, v_new_pairs;
};

/// Compile-time shape: state rows KP (K padded: 128 or 256), chunk BT, V block BV, NS buffers of the w, k, u tiles
/// (the chunks in flight: NS - 1 are loading while one is computed).
template <typename TK, int KP, int BT, int BV, int NS>
struct FwdHMma {
  static constexpr int kLdK = KP + 8;  ///< row stride of the w / k tiles: 8 rows of an ldmatrix hit distinct banks
  static constexpr int kLdV = BV + 8;  ///< row stride of the u and S / v_new tiles
  static constexpr int kMT = KP / 16 / gdn::kWarps;  ///< 16-row tiles of S per warp
  static constexpr int kNV = BV / 8;                 ///< 8-column tiles of S and v_new
  static constexpr int kVT = (BT / 16) * kNV;        ///< 16 x 8 tiles of v_new
  static constexpr int kNPW = kVT >= gdn::kWarps ? kVT / gdn::kWarps : 1;  ///< v_new tiles per warp (one row block)
  static constexpr int kWTile = BT * kLdK, kUTile = BT * kLdV, kSTile = KP * kLdV;
  /// w, k, u in NS buffers, the S tile, the gated v_new tile (the size of a u tile), g double-buffered
  static constexpr std::size_t kSmem =
      (NS * (2 * kWTile + kUTile) + kSTile + kUTile) * sizeof(TK) + 2 * BT * sizeof(float);
  static_assert(NS >= 2, "at least double buffering");
  static_assert(kMT >= 1 && kNV % 2 == 0 && kNV % kNPW == 0 && (kNPW == 1 || kNPW % 2 == 0), "tile split");
};

__device__ __forceinline__ void st_pair(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }

/// f(row, col, element) for every element of this thread's state fragments S[m][j][e]: warp w owns the row tiles
/// w MT .. w MT + MT - 1 of 16 rows; element e of an mma accumulator sits at row lane / 4 (+ 8 for e >= 2) and
/// column 2 (lane % 4) + e % 2 of its 16 x 8 tile.
template <int MT, int NV, typename F>
__device__ __forceinline__ void for_each_state(float (&S)[MT][NV][4], int warp, int lane, F&& f) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        f((warp * MT + m) * 16 + lane / 4 + (e >= 2 ? 8 : 0), j * 8 + 2 * (lane % 4) + (e & 1), S[m][j][e]);
      }
    }
  }
}

template <typename TK, int KP, int BT, int BV, int NS>
__global__ void __launch_bounds__(kThreads) fwd_h_mma_kernel(const FwdHArgs a, int64_t vblocks, int64_t units,
                                                             FwdHVec vec, DeviceErrorRecord* errors) {
  using C = FwdHMma<TK, KP, BT, BV, NS>;
  pdl_wait_and_release();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  TK* const wsm = reinterpret_cast<TK*>(smem_raw);  // [NS][BT][kLdK]
  TK* const ksm = wsm + NS * C::kWTile;             // [NS][BT][kLdK]
  TK* const usm = ksm + NS * C::kWTile;             // [NS][BT][kLdV]
  TK* const ssm = usm + NS * C::kUTile;             // S [KP][kLdV]
  TK* const vsm = ssm + C::kSTile;                  // the gated v_new [BT][kLdV]
  float* const gsm = reinterpret_cast<float*>(vsm + C::kUTile);  // [2][BT]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int qr = lane / 4, qc = 2 * (lane % 4);  // accumulator fragment: rows qr, qr + 8; columns qc, qc + 1
  const int K = static_cast<int>(a.geo.K), kp = (K + 15) / 16 * 16;
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V, group = HV / a.geo.H;
  const bool gated = a.g.data != nullptr;
  const float* const gp = static_cast<const float*>(a.g.data);
  const TK* const wp = static_cast<const TK*>(a.w.data);
  const TK* const kptr = static_cast<const TK*>(a.k.data);
  const TK* const up = static_cast<const TK*>(a.u.data);
  TK* const hp = static_cast<TK*>(a.h.data);
  TK* const vnp = static_cast<TK*>(a.v_new.data);
  // this warp's v_new tiles: row block vm, column tiles vn0 .. vn0 + kNPW
  const int vt0 = warp * C::kNPW;
  const bool v_active = vt0 < C::kVT;
  const int vm = vt0 / C::kNV, vn0 = vt0 % C::kNV;

  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t vb = unit % vblocks, nh = unit / vblocks, hv = nh % HV, n = nh / HV, hk = hv / group;
    const int64_t col0 = vb * BV;
    const int vcols = static_cast<int>(min(static_cast<int64_t>(BV), V - col0));
    const SeqBounds sb = sequence_bounds(a.geo, n);
    if (sb.bad && hv == 0 && vb == 0 && tid == 0) record_device_error(errors, a.geo.cu_site, n);
    const int64_t state0 = (n * HV + hv) * KV;
    float S[C::kMT][C::kNV][4];
    for_each_state(S, warp, lane, [&](int row, int col, float& x) {
      x = (a.h0 && row < K && col < vcols) ? gdn::load_f(a.h0, a.h0_dtype, state0 + row * V + col0 + col) : 0.f;
    });
    // w, k, u rows of the chunk at t0 -> buffer `buf` (cp.async, committed by the caller)
    auto issue = [&](int64_t t0, int buf) {
      const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0));
      gdn::load_tile<TK, BT>(wsm + buf * C::kWTile, C::kLdK, kp, wp + gdn::at(a.w, sb.batch, t0, hv), a.w.stride_t, L,
                             K, vec.w, kThreads);
      gdn::load_tile<TK, BT>(ksm + buf * C::kWTile, C::kLdK, kp, kptr + gdn::at(a.k, sb.batch, t0, hk), a.k.stride_t,
                             L, K, vec.k, kThreads);
      gdn::load_tile<TK, BT>(usm + buf * C::kUTile, C::kLdV, BV, up + gdn::at(a.u, sb.batch, t0, hv) + col0,
                             a.u.stride_t, L, vcols, vec.u, kThreads);
    };
    auto load_g = [&](int64_t t0) {  // g of row tid of the chunk at t0 (0 past it or without g)
      return (gated && tid < BT && t0 + tid < sb.eos) ? gp[gdn::at(a.g, sb.batch, t0 + tid, hv)] : 0.f;
    };
    if (sb.eos > sb.bos) {
      __syncthreads();  // the previous unit is done with the shared tiles
      // Prologue: chunks 0 .. NS - 2 into buffers 0 .. NS - 2, one cp.async group each (empty past the sequence), so
      // that before chunk c the groups committed are NS - 1 + c and waiting until NS - 2 remain lands chunk c.
#pragma unroll
      for (int p = 0; p < NS - 1; ++p) {
        if (sb.bos + p * BT < sb.eos) issue(sb.bos + p * BT, p);
        cp_async_commit();
      }
      if (tid < BT) gsm[tid] = load_g(sb.bos);
      int buf = 0, gbuf = 0;  // tile buffer of this chunk (chunk index mod NS); g buffer (chunk index mod 2)
      // Two block barriers per chunk. The S tile is last read (w S, h) before barrier B of the previous chunk; the
      // v_new tile and the previous chunk's tile buffer (k) before barrier A of this one, g[gbuf ^ 1] before
      // barrier A too.
      for (int64_t t0 = sb.bos; t0 < sb.eos; t0 += BT, buf = buf + 1 == NS ? 0 : buf + 1, gbuf ^= 1) {
        const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0));
        const bool has_next = t0 + BT < sb.eos;

        // 1. S -> shared memory (rounded once): h[slot] and the B operand of w S. Rows >= K are zero.
#pragma unroll
        for (int m = 0; m < C::kMT; ++m) {
          const int row = (warp * C::kMT + m) * 16 + qr;
#pragma unroll
          for (int j = 0; j < C::kNV; ++j) {
            st_pair(ssm + row * C::kLdV + j * 8 + qc, pack2<TK>(S[m][j][0], S[m][j][1]));
            st_pair(ssm + (row + 8) * C::kLdV + j * 8 + qc, pack2<TK>(S[m][j][2], S[m][j][3]));
          }
        }
        cp_async_wait<NS - 2>();  // this chunk's tiles have landed
        __syncthreads();          // barrier A
        // chunk c + NS - 1 into the buffer of chunk c - 1 (free since barrier A) while this one is computed
        if (t0 + (NS - 1) * BT < sb.eos) issue(t0 + (NS - 1) * BT, buf == 0 ? NS - 1 : buf - 1);
        cp_async_commit();
        const float g_next = has_next ? load_g(t0 + BT) : 0.f;  // stored to shared memory at the end of this chunk
        const int64_t hoff = state_offset(a.h, sb.batch, chunk_slot(a.geo, n, sb.bos, t0), hv, HV, KV);
        gdn::store_tile(hp + hoff + col0, V, ssm, C::kLdV, K, vcols, vec.h, kThreads);

        // 2. v_new = u - w S for this warp's tiles; stored ungated, and gated (0 past the chunk) into the v_new tile
        const float* const gc = gsm + gbuf * BT;
        const float glast = gc[L - 1];
        float vacc[C::kNPW][4];
#pragma unroll
        for (int p = 0; p < C::kNPW; ++p) vacc[p][0] = vacc[p][1] = vacc[p][2] = vacc[p][3] = 0.f;
        if (v_active) {
          if (vm * 16 < L) {  // warp-uniform
            const TK* const a_ptr = wsm + buf * C::kWTile + (vm * 16 + (lane & 15)) * C::kLdK + (lane >> 4) * 8;
            const int b_row = C::kNPW == 1 ? (lane & 15) : (lane & 7) + ((lane >> 3) & 1) * 8;
            const int b_col = C::kNPW == 1 ? vn0 * 8 : (vn0 + (lane >> 4)) * 8;
            const TK* const b_ptr = ssm + b_row * C::kLdV + b_col;
            // two accumulator sets (even and odd 16-column steps of K, each ascending, added at the end) halve the
            // chain of dependent mma
            float vodd[C::kNPW][4];
#pragma unroll
            for (int p = 0; p < C::kNPW; ++p) vodd[p][0] = vodd[p][1] = vodd[p][2] = vodd[p][3] = 0.f;
            auto step = [&](int kk, float (&acc)[C::kNPW][4]) {
              uint32_t af[4];
              ldmatrix_x4(af, a_ptr + kk);
              if constexpr (C::kNPW == 1) {
                uint32_t b0, b1;
                ldmatrix_x2_trans(b0, b1, b_ptr + kk * C::kLdV);
                mma_m16n8k16<TK>(acc[0], af, b0, b1);
              } else {
#pragma unroll
                for (int p = 0; p < C::kNPW; p += 2) {
                  uint32_t b[4];
                  ldmatrix_x4_trans(b, b_ptr + kk * C::kLdV + p * 8);
                  mma_m16n8k16<TK>(acc[p], af, b[0], b[1]);
                  mma_m16n8k16<TK>(acc[p + 1], af, b[2], b[3]);
                }
              }
            };
            for (int kk = 0; kk < kp; kk += 32) {
              step(kk, vacc);
              if (kk + 16 < kp) step(kk + 16, vodd);
            }
#pragma unroll
            for (int p = 0; p < C::kNPW; ++p) {
#pragma unroll
              for (int e = 0; e < 4; ++e) vacc[p][e] += vodd[p][e];
            }
          }
          const TK* const ut = usm + buf * C::kUTile;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int i = vm * 16 + qr + 8 * hr;
            const float f = i < L ? (gated ? expf(glast - gc[i]) : 1.f) : 0.f;
            TK* const vrow = i < L ? vnp + gdn::at(a.v_new, sb.batch, t0 + i, hv) + col0 : nullptr;
#pragma unroll
            for (int p = 0; p < C::kNPW; ++p) {
              const int col = (vn0 + p) * 8 + qc;
              const float v0 = to_float(ut[i * C::kLdV + col]) - vacc[p][2 * hr];
              const float v1 = to_float(ut[i * C::kLdV + col + 1]) - vacc[p][2 * hr + 1];
              if (vrow) {
                if (vec.v_new_pairs && col + 1 < vcols) {
                  st_pair(vrow + col, pack2<TK>(v0, v1));
                } else {
                  if (col < vcols) vrow[col] = from_float<TK>(v0);
                  if (col + 1 < vcols) vrow[col + 1] = from_float<TK>(v1);
                }
              }
              st_pair(vsm + i * C::kLdV + col, pack2<TK>(v0 * f, v1 * f));
            }
          }
        }
        __syncthreads();  // barrier B

        // 3. S = exp(g_last) S + k^T v_gated, ascending over the chunk's rows
        const float decay = gated ? expf(glast) : 1.f;
        for_each_state(S, warp, lane, [&](int, int, float& x) { x *= decay; });
        const TK* const kt = ksm + buf * C::kWTile;
        const int lp = (L + 15) / 16 * 16;
        for (int kk = 0; kk < lp; kk += 16) {
          uint32_t bf[C::kNV / 2][4];
#pragma unroll
          for (int p = 0; p < C::kNV / 2; ++p) {
            const int row = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4_trans(bf[p], vsm + row * C::kLdV + (2 * p + (lane >> 4)) * 8);
          }
#pragma unroll
          for (int m = 0; m < C::kMT; ++m) {
            const int m0 = (warp * C::kMT + m) * 16;
            if (m0 < K) {  // warp-uniform; rows >= K stay zero
              uint32_t af[4];
              ldmatrix_x4_trans(af, kt + (kk + (lane & 7) + (lane >> 4) * 8) * C::kLdK + m0 + ((lane >> 3) & 1) * 8);
#pragma unroll
              for (int p = 0; p < C::kNV / 2; ++p) {
                mma_m16n8k16<TK>(S[m][2 * p], af, bf[p][0], bf[p][1]);
                mma_m16n8k16<TK>(S[m][2 * p + 1], af, bf[p][2], bf[p][3]);
              }
            }
          }
        }
        if (has_next && tid < BT) gsm[(gbuf ^ 1) * BT + tid] = g_next;
      }
    }
    if (a.ht) {
      for_each_state(S, warp, lane, [&](int row, int col, float& x) {
        if (row < K && col < vcols) a.ht[state0 + row * V + col0 + col] = x;
      });
    }
  }
}

template <typename TK, int KP, int BT, int BV, int NS>
void launch_fwd_h_mma(const FwdHArgs& a, const FwdHVec& vec, int device, cudaStream_t s) {
  using C = FwdHMma<TK, KP, BT, BV, NS>;
  const char* op = "chunk_gated_delta_rule_fwd_h";
  const int64_t vblocks = (a.V + BV - 1) / BV;
  const int64_t units = a.geo.N * a.geo.HV * vblocks;
  auto kernel = fwd_h_mma_kernel<TK, KP, BT, BV, NS>;
  allow_smem(kernel, C::kSmem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kThreads), C::kSmem, s, device, a, vblocks, units, vec, errors);
}

/// Blocks the V split of one variant gives.
int64_t fwd_h_blocks(const FwdHArgs& a, int bv) { return a.geo.N * a.geo.HV * ((a.V + bv - 1) / bv); }

/// Pipeline depth of a V block width. A block walks its chunks in order and each chunk's compute is short (a few
/// dependent mma), so on small grids a chunk's tile loads are issued several chunks ahead. KP = 256 and BV = 64:
/// double buffering (three buffers at BV = 64 measured 0-3% slower on the H200 than two). BV = 16 / 32: four buffers
/// when the grid is one block per SM at most, else two (two blocks per SM then share the latency instead); four
/// measured 8-15% faster on 2/8 [2048] .. [2 x 16384] and 16/32 [4096], 1-3% slower on 16/32 [8192] / [32768].
template <typename TK, int KP, int BT, int BV>
void launch_fwd_h_ns(const FwdHArgs& a, const FwdHVec& vec, int device, cudaStream_t s) {
  if constexpr (KP > 128) {
    launch_fwd_h_mma<TK, KP, BT, BV, 2>(a, vec, device, s);
  } else if constexpr (BV == 64) {
    launch_fwd_h_mma<TK, KP, BT, BV, 2>(a, vec, device, s);
  } else {
    if (fwd_h_blocks(a, BV) <= sm_count(device)) {
      launch_fwd_h_mma<TK, KP, BT, BV, 4>(a, vec, device, s);
    } else {
      launch_fwd_h_mma<TK, KP, BT, BV, 2>(a, vec, device, s);
    }
  }
}

/// BV: BT = 64: the widest of 64 / 32 that still gives >= kFillBlocks blocks (about one per SM), else 16;
/// BT = 16 / 32: 32.
constexpr int64_t kFillBlocks = 128;
template <typename TK, int KP, int BT>
void launch_fwd_h_bv(const FwdHArgs& a, const FwdHVec& vec, int device, cudaStream_t s) {
  if constexpr (BT == 64) {
    if (fwd_h_blocks(a, 64) >= kFillBlocks) {
      launch_fwd_h_ns<TK, KP, BT, 64>(a, vec, device, s);
    } else if (fwd_h_blocks(a, 32) >= kFillBlocks) {
      launch_fwd_h_ns<TK, KP, BT, 32>(a, vec, device, s);
    } else {
      launch_fwd_h_ns<TK, KP, BT, 16>(a, vec, device, s);
    }
  } else {
    launch_fwd_h_ns<TK, KP, BT, 32>(a, vec, device, s);
  }
}

template <typename TK, int KP>
void launch_fwd_h_bt(const FwdHArgs& a, const FwdHVec& vec, int device, cudaStream_t s) {
  switch (a.geo.BT) {
    case 16: launch_fwd_h_bv<TK, KP, 16>(a, vec, device, s); break;
    case 32: launch_fwd_h_bv<TK, KP, 32>(a, vec, device, s); break;
    default: launch_fwd_h_bv<TK, KP, 64>(a, vec, device, s); break;
  }
}

/// The tensor-core path: k, w, u, h and v_new all in one 16-bit dtype. Returns false (nothing launched) otherwise.
bool launch_fwd_h_tc(const FwdHArgs& a, int device, cudaStream_t s) {
  const DType dt = a.k.dtype;
  if (a.w.dtype != dt || a.u.dtype != dt || a.h.dtype != dt || a.v_new.dtype != dt) return false;
  const int64_t K = a.geo.K, V = a.V;
  FwdHVec vec;
  vec.w = gdn::rows_16b(a.w, K);
  vec.k = gdn::rows_16b(a.k, K);
  vec.u = gdn::rows_16b(a.u, V);
  vec.h = reinterpret_cast<std::uintptr_t>(a.h.data) % 16 == 0 && V % 8 == 0;
  vec.v_new_pairs = reinterpret_cast<std::uintptr_t>(a.v_new.data) % 4 == 0 && V % 2 == 0 &&
                    a.v_new.stride_t % 2 == 0 && a.v_new.stride_h % 2 == 0 && a.v_new.stride_b % 2 == 0;
  return gdn::with_16bit(dt, [&](auto tag) {
    using TK = decltype(tag);
    if (K <= 128) {
      launch_fwd_h_bt<TK, 128>(a, vec, device, s);
    } else {
      launch_fwd_h_bt<TK, 256>(a, vec, device, s);
    }
  });
}

}  // namespace

void chunk_gated_delta_rule_fwd_h(const FwdHArgs& a, int device, void* stream) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.geo.BT != 16 && a.geo.BT != 32 && a.geo.BT != 64) {
    throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  if (!launch_fwd_h_tc(a, device, s)) {
    switch (a.geo.BT) {
      case 16: launch_fwd_h_ffma<16>(a, device, s); break;
      case 32: launch_fwd_h_ffma<32>(a, device, s); break;
      default: launch_fwd_h_ffma<64>(a, device, s); break;
    }
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
