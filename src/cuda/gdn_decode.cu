// CUDA backend of the decode ops: fused_recurrent_gated_delta_rule (FLA form), fused_recurrent_gated_delta_rule_update
// (state pool) and fused_sigmoid_gating_delta_rule_update (gates from the raw projections); the form is chosen by the
// arguments (include/fuseops/gdn_forward.h; FLA and vLLM `fused_recurrent.py`). Per token, in both kernels:
//   S *= exp(g); (S^T k, S^T q) reduced over K; v' = beta (v - S^T k); S += k v'^T; o = scale (S^T q + v' (k . q))
//   (= scale S_new^T q); with use_qk_l2norm_in_kernel q and k are first multiplied by 1 / sqrt(sum x^2 + 1e-6).
// Sums run in a fixed order: results do not depend on the other sequences of the batch.
//
// A bandwidth problem: per (sequence, value head) the fp32 state is read once and written once.
//
// Fast kernel (decode_warp_kernel, docs/ops/gdn-log.md "decode kernel"): a unit is (sequence, value head, slice of
// 128 / KG state columns), done by one warp without barriers; persistent warps (a grid that stays resident) walk the
// units (blocks of 2 or 4 independent warps), and while a warp computes one unit the state of its next one is copied
// into the warp's shared buffer (cp.async: bytes in flight that hold no registers), with its first token's q / k rows
// and v slice for 16-bit inputs (stage_inputs); state stores are streaming. Lane = kg * (32 / KG) + vl holds the 4
// columns slice * 128 / KG + 4 vl .. + 3 of the R consecutive rows kg R .. kg R + R - 1 (K = KG R; R = 16, or 8)
// in fp32 registers for all the sequence's tokens (R = 8 at K = 128 for steps of few sequences); sums over K run as
// 8-row FMA chains over the lane's rows, then over the row groups by xor shuffles in one fixed tree (every lane of a
// column gets the same bits, fp addition being commutative, and R = 8 or 16 gives the same bits).
//
// Fallback kernel (decode_kernel): one 256-thread block per (sequence, value head, block of 32 state columns), three
// block barriers per token; taken when K is not 64, 128 or 256, V % 4 != 0, a state tensor (pool,
// initial_state, final_state) is not 16-byte aligned, the pool's slots are not a whole number of 16-byte steps apart
// (a padded pool, state_pool's stride(0)), or beta is per value column ([B, T, HV, V], FLA's per-channel
// beta: each block loads the betas of its 32 columns beside v; the fast kernel takes per-head beta only). Lane l of
// warp w holds columns 4 (l % 8) .. 4 (l % 8) + 3 of the rows r = 4 w + l / 8 + 32 j (j < 8, K <= 256), so one
// warp-wide access covers 4 rows x 128 contiguous bytes; the sums over K reduce over the 4 row lanes by shuffles, then
// over the 8 warps through shared memory.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/fast_divmod.h"
#include "cuda/device_error.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/vec.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;
using gdn::kWarps;
constexpr int kBV = 32;       ///< state columns per block
constexpr int kMaxRows = 8;   ///< rows per thread: K <= 32 * kMaxRows

/// 4 consecutive state elements at element index i (columns col .. col + 3, `n` of them valid), vectorised when
/// `vec` (the 4 are in range and aligned).
__device__ __forceinline__ void load4(const void* p, DType dt, int64_t i, int n, bool vec, float (&x)[4]) {
  if (vec && n == 4) {
    if (dt == DType::f32) {
      const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
      x[0] = v.x;
      x[1] = v.y;
      x[2] = v.z;
      x[3] = v.w;
      return;
    }
    if (dt == DType::bf16) {
      const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(p) + i);
      const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
      const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
      x[0] = __low2float(lo);
      x[1] = __high2float(lo);
      x[2] = __low2float(hi);
      x[3] = __high2float(hi);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = e < n ? gdn::load_f(p, dt, i + e) : 0.f;
}
__device__ __forceinline__ void store4(void* p, DType dt, int64_t i, int n, bool vec, const float (&x)[4]) {
  if (vec && n == 4) {
    if (dt == DType::f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = make_float4(x[0], x[1], x[2], x[3]);
      return;
    }
    if (dt == DType::bf16) {
      __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]), hi = __floats2bfloat162_rn(x[2], x[3]);
      uint2 raw;
      raw.x = *reinterpret_cast<uint32_t*>(&lo);
      raw.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p) + i) = raw;
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (e < n) gdn::store_f(p, dt, i + e, x[e]);
  }
}

/// exp(A_log[hv]) and dt_bias[hv] of the fused gating form (unused otherwise).
struct HeadGate {
  float A = 0.f, bias = 0.f;
};
__device__ __forceinline__ HeadGate head_gate(const DecodeArgs& a, int64_t hv) {
  HeadGate h;
  if (a.fused_gating) {
    h.A = expf(gdn::load_f(a.A_log.data, a.A_log.dtype, hv * a.A_log.stride_h));
    h.bias = gdn::load_f(a.dt_bias.data, a.dt_bias.dtype, hv * a.dt_bias.stride_h);
  }
  return h;
}

/// g (log decay) and beta of token t (batch row b) of value head hv: given, or from the raw a, b (fused gating).
__device__ __forceinline__ void token_gates(const DecodeArgs& a, const HeadGate& h, int64_t b, int64_t t, int64_t hv,
                                            float& g, float& beta) {
  if (a.fused_gating) {
    const float x = gdn::load_f(a.a.data, a.a.dtype, gdn::at(a.a, b, t, hv)) + h.bias;
    g = -h.A * softplus_gate(x, a.softplus_beta, a.softplus_threshold);
    beta = sigmoid_gate(gdn::load_f(a.b.data, a.b.dtype, gdn::at(a.b, b, t, hv)));
  } else {
    g = a.g.data ? gdn::load_f(a.g.data, a.g.dtype, gdn::at(a.g, b, t, hv)) : 0.f;
    beta = a.beta.data ? gdn::load_f(a.beta.data, a.beta.dtype, gdn::at(a.beta, b, t, hv)) : 1.f;
  }
}

/// Pool slot written after token `tr` (0-based in the sequence) of sequence n, or -1; a bad entry is recorded when
/// `leader`.
__device__ __forceinline__ int64_t write_slot(const DecodeArgs& a, int64_t n, int64_t tr, int64_t len, bool leader,
                                              DeviceErrorRecord* errors) {
  bool bad = false;
  const int64_t slot = pool_write_slot(a, n, tr, len, &bad);
  if (bad && leader) record_device_error(errors, a.idx_site, a.idx_cols > 0 ? n * a.idx_cols + tr : n);
  return slot;
}
/// As write_slot, for a sequence whose slot read first is `start` (>= 0): with [N] indices the slot written after its
/// last token is that same entry, which is then not loaded again.
__device__ __forceinline__ int64_t write_slot(const DecodeArgs& a, int64_t start, int64_t n, int64_t tr, int64_t len,
                                              bool leader, DeviceErrorRecord* errors) {
  if (a.idx_cols == 0) return tr == len - 1 ? start : -1;
  return write_slot(a, n, tr, len, leader, errors);
}

/// o rows [t0, t1) of batch row `batch`, value head hv, columns col .. col + ncols - 1, written as 0: a padding
/// sequence's rows, and the tokens past cu_seqlens[N] of a pool form (GdnGeometry::cu_tail: [the last sequence's end,
/// T), by the lanes of the last sequence's units).
__device__ __forceinline__ void zero_o_rows(const DecodeArgs& a, int64_t batch, int64_t t0, int64_t t1, int64_t hv,
                                            int64_t col, int ncols, bool vec) {
  const float z[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t t = t0; t < t1; ++t) store4(a.o.data, a.o.dtype, gdn::at(a.o, batch, t, hv) + col, ncols, vec, z);
}

struct DecodeParams {
  int64_t vblocks, units;
  bool vec;  ///< V % 4 == 0 and the state tensors 16-byte aligned
  DeviceErrorRecord* errors;
};

// Two blocks per SM (128 registers, no spills): left to itself the compiler took 147 registers once the kernel gained
// the tail rows of cu_seqlens[N] < T, one block per SM, and the per-channel beta case of gdn-decode ran 1.6x slower
// (H100, bench/results/h200/gdn.md, sixtieth session).
__global__ void __launch_bounds__(kThreads, 2) decode_kernel(const DecodeArgs a, const DecodeParams prm) {
  pdl_wait_and_release();
  __shared__ float qs[256], ks[256], vs[kBV], bs[kBV];  // bs: the columns' betas (beta_per_channel)
  __shared__ float red[kWarps][kBV][2];
  __shared__ float scal[5];  // g, beta, sum q^2, sum k^2, q . k
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int vl = lane % 8, rgi = warp * 4 + lane / 8;
  const int64_t HV = a.geo.HV, K = a.geo.K, V = a.V, KV = K * V, group = HV / a.geo.H;

  for (int64_t unit = blockIdx.x; unit < prm.units; unit += gridDim.x) {
    const int64_t vb = unit % prm.vblocks, nh = unit / prm.vblocks, hv = nh % HV, n = nh / HV, hk = hv / group;
    const int64_t col = vb * kBV + vl * 4;
    const int ncols = static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(4), V - col)));
    const bool leader = hv == 0 && vb == 0 && tid == 0;  // records bad device values once per sequence
    const SeqBounds sb = sequence_bounds(a.geo, n);
    if (sb.bad && leader) record_device_error(prm.errors, a.geo.cu_site, n);
    if (a.geo.cu_tail && n + 1 == a.geo.N && warp == 0 && lane < 8) zero_o_rows(a, 0, sb.eos, a.geo.T, hv, col, ncols, false);
    const int64_t len = sb.eos - sb.bos;
    float S[kMaxRows][4];
    if (a.pool_form) {
      const PoolSeq ps = pool_sequence(a, n, len);
      if (ps.bad_site && leader) record_device_error(prm.errors, ps.bad_site, ps.bad_index);
      if (ps.start < 0) {  // padding: o rows 0, nothing read or written
        if (warp == 0 && lane < 8) zero_o_rows(a, sb.batch, sb.bos, sb.eos, hv, col, ncols, false);
        continue;
      }
      const int64_t base = pool_offset(a, ps.start, hv, KV);
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        if (r < K) {
          load4(a.pool, a.pool_dtype, base + r * V + col, ncols, prm.vec, S[j]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) S[j][e] = 0.f;
        }
      }
    } else {
      const int64_t base = (n * HV + hv) * KV;
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        if (a.h0 && r < K) {
          load4(a.h0, a.h0_dtype, base + r * V + col, ncols, prm.vec, S[j]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) S[j][e] = 0.f;
        }
      }
    }
    const HeadGate hg = head_gate(a, hv);

    for (int64_t t = sb.bos; t < sb.eos; ++t) {
      __syncthreads();  // the previous token (or unit) is done with the shared buffers
      for (int64_t e = tid; e < K; e += kThreads) {
        qs[e] = gdn::load_f(a.q.data, a.q.dtype, gdn::at(a.q, sb.batch, t, hk) + e);
        ks[e] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, sb.batch, t, hk) + e);
      }
      if (tid < kBV) {
        const int64_t c = vb * kBV + tid;
        vs[tid] = c < V ? gdn::load_f(a.v.data, a.v.dtype, gdn::at(a.v, sb.batch, t, hv) + c) : 0.f;
        if (a.beta_per_channel) {
          bs[tid] = c < V ? gdn::load_f(a.beta.data, a.beta.dtype, gdn::at(a.beta, sb.batch, t, hv) + c) : 0.f;
        }
      }
      if (tid == kBV) {
        float g, beta;
        token_gates(a, hg, sb.batch, t, hv, g, beta);
        scal[0] = g;
        scal[1] = beta;  // (per channel: column 0's, unused; bs holds the columns' betas)
      }
      __syncthreads();
      if (warp < 3) {  // sum q^2, sum k^2, q . k over K
        float s = 0.f;
        for (int64_t e = lane; e < K; e += 32) {
          const float x = warp == 1 ? ks[e] : qs[e], y = warp == 0 ? qs[e] : ks[e];
          s = fmaf(x, y, s);
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        if (lane == 0) scal[2 + warp] = s;
      }
      __syncthreads();
      const float rq = a.l2norm ? 1.f / sqrtf(scal[2] + 1e-6f) : 1.f, rk = a.l2norm ? 1.f / sqrtf(scal[3] + 1e-6f) : 1.f;
      const float decay = expf(scal[0]), beta = scal[1];
      float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        const float kr = r < K ? ks[r] * rk : 0.f, qr = r < K ? qs[r] * rq : 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          S[j][e] *= decay;
          sk[e] = fmaf(S[j][e], kr, sk[e]);
          sq[e] = fmaf(S[j][e], qr, sq[e]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sk[e] += __shfl_xor_sync(0xffffffffu, sk[e], 8);
        sk[e] += __shfl_xor_sync(0xffffffffu, sk[e], 16);
        sq[e] += __shfl_xor_sync(0xffffffffu, sq[e], 8);
        sq[e] += __shfl_xor_sync(0xffffffffu, sq[e], 16);
      }
      if (lane < 8) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          red[warp][vl * 4 + e][0] = sk[e];
          red[warp][vl * 4 + e][1] = sq[e];
        }
      }
      __syncthreads();
      const float kq = scal[4] * rq * rk;
      float vp[4], o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float tk = 0.f, tq = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          tk += red[w][vl * 4 + e][0];
          tq += red[w][vl * 4 + e][1];
        }
        vp[e] = (a.beta_per_channel ? bs[vl * 4 + e] : beta) * (vs[vl * 4 + e] - tk);
        o[e] = a.scale * fmaf(vp[e], kq, tq);
      }
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        const float kr = r < K ? ks[r] * rk : 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][e] = fmaf(kr, vp[e], S[j][e]);
      }
      if (warp == 0 && lane < 8) store4(a.o.data, a.o.dtype, gdn::at(a.o, sb.batch, t, hv) + col, ncols, false, o);
      if (a.pool_form) {
        const int64_t slot = write_slot(a, n, t - sb.bos, len, leader, prm.errors);
        if (slot >= 0) {
          const int64_t base = pool_offset(a, slot, hv, KV);
#pragma unroll
          for (int j = 0; j < kMaxRows; ++j) {
            const int64_t r = rgi + 32 * j;
            if (r < K) store4(a.pool, a.pool_dtype, base + r * V + col, ncols, prm.vec, S[j]);
          }
        }
      }
    }
    if (a.ht) {
      const int64_t base = (n * HV + hv) * KV;
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        if (r < K) store4(a.ht, DType::f32, base + r * V + col, ncols, prm.vec, S[j]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Fast kernel: persistent warps, each over units (sequence, value head, column slice)

/// State rows per lane R (K = KG R): 16, or 8 at K = 128 when the units of 16-row lanes leave warps idle (a decode of
/// few sequences: twice the units, half the chain per warp). Every sum over K runs over 8-row chains in a fixed tree
/// (rows_dot, sum_groups), so both give the same bits.
constexpr int kRows = 16, kHalfRows = 8;
/// Warps per block: 4 when the units fill the resident warps at least once (measured 1-2% faster at K = V = 128 than
/// 2), else 2 (the units of a 1-sequence decode spread over twice as many SMs); see launch_warp_kernel_kg().
constexpr int kWarpBlock = 2, kWideWarpBlock = 4;

struct WarpParams {
  int64_t slices, units;       ///< column slices per head (ceil(V / (128 / KG))); N * HV * slices
  bool q_vec, k_vec;           ///< 16-byte loads of the lane's kRows elements of q / k (pointer and strides allow)
  bool v_vec, o_vec;           ///< 4-element vector loads of v / stores of o
  /// The first token's q / k rows and v slice are copied into shared memory with the state (16-bit q, k, v of one
  /// dtype, K <= 128, every piece 16-byte aligned; stage_inputs_applies()).
  bool stage_inputs;
  /// With stage_inputs, the first token's g and beta too, as the 4-byte words that hold them (stage_gates_applies()),
  /// when every warp has at most one unit (warp_grid()).
  bool stage_gates;
  /// At the end of each unit (not after a padding unit), the warp that will take slice 0 of the unit two steps ahead
  /// prefetches that head's whole state into the L2 (l2_prefetch_applies()); prefetch_bytes: K V state elements in
  /// bytes (at most 256 KB: K, V <= 256).
  bool l2_prefetch;
  unsigned prefetch_bytes;
  DeviceErrorRecord* errors;
  /// unit -> (n HV + hv, slice), n HV + hv -> (n, hv), hv -> (key head, rest): divisions by launch constants
  FastDivmod by_slices, by_hv, by_group;
};

/// R consecutive elements of a q / k row at element index i, as f32; 16-byte loads when `vec`.
template <int R>
__device__ __forceinline__ void load_rows(const void* p, DType dt, int64_t i, bool vec, float (&x)[R]) {
  if (vec) {
    switch (dt) {
      case DType::f32: load_as_floats(static_cast<const float*>(p) + i, x); return;
      case DType::bf16: load_as_floats(static_cast<const __nv_bfloat16*>(p) + i, x); return;
      case DType::f16: load_as_floats(static_cast<const __half*>(p) + i, x); return;
      default: break;
    }
  }
#pragma unroll
  for (int e = 0; e < R; ++e) x[e] = gdn::load_f(p, dt, i + e);
}

/// The lane's part of a sum over K: sum_j a[j] b[j] over its R rows, as 8-row FMA chains (each from 0) added in order.
template <int R>
__device__ __forceinline__ float rows_dot(const float (&a)[R], const float (&b)[R]) {
  static_assert(R % 8 == 0, "8-row chains");
  float part[R / 8];
#pragma unroll
  for (int c = 0; c < R / 8; ++c) {
    part[c] = 0.f;
#pragma unroll
    for (int j = 8 * c; j < 8 * c + 8; ++j) part[c] = fmaf(a[j], b[j], part[c]);
  }
  float x = part[0];
#pragma unroll
  for (int c = 1; c < R / 8; ++c) x += part[c];
  return x;
}

/// Sum over the KG row groups of a warp (lane = kg * (32 / KG) + vl) of the lanes' rows_dot parts, by xor shuffles;
/// the same bits in every lane. The tree is that of 16-row groups: with R = 8 the two halves of each 16-row group
/// (kg, kg ^ 1: lanes 32 / KG apart) are added first, as a 16-row lane adds its two chains; then the 16-row groups
/// pair as with R = 16 (lanes 16, 8, ... apart). So R = 8 and R = 16 give the same bits.
template <int KG, int R>
__device__ __forceinline__ float sum_groups(float x) {
  static_assert(R == 8 || R == 16, "8 or 16 rows per lane");
  constexpr int low = 32 / KG;  // lanes between neighbouring row groups
  if constexpr (R == 8) x += __shfl_xor_sync(0xffffffffu, x, low);
#pragma unroll
  for (int m = 16; m >= (R == 8 ? 2 * low : low); m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

/// A token's q / k (the lane's R rows of each) made ready: with use_qk_l2norm_in_kernel both multiplied by
/// 1 / sqrt(sum x^2 + 1e-6) (in place); returns k . q over K (the same bits in every lane).
template <int KG, int R>
__device__ __forceinline__ float token_norms(const DecodeArgs& a, float (&q)[R], float (&k)[R]) {
  if (a.l2norm) {
    const float rq = 1.f / sqrtf(sum_groups<KG, R>(rows_dot<R>(q, q)) + 1e-6f);
    const float rk = 1.f / sqrtf(sum_groups<KG, R>(rows_dot<R>(k, k)) + 1e-6f);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      q[j] *= rq;
      k[j] *= rk;
    }
  }
  return sum_groups<KG, R>(rows_dot<R>(k, q));
}

/// One token's step on the lane's R x 4 state elements S (rows kg R.., its 4 columns): S *= exp(g); v' = beta (v -
/// S^T k); o = scale (S^T q + v' (k . q)); S += k v'^T. The sums over K as rows_dot (8-row chains added in order,
/// rows outer), then sum_groups.
template <int KG, int R>
__device__ __forceinline__ void token_update(const DecodeArgs& a, float (&S)[R][4], const float (&q)[R],
                                             const float (&k)[R], const float (&v)[4], float g, float beta, float kq,
                                             float (&o)[4]) {
  const float decay = expf(g);
  float sk[R / 8][4], sq[R / 8][4];
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      S[j][e] *= decay;
      sk[j / 8][e] = fmaf(S[j][e], k[j], j % 8 == 0 ? 0.f : sk[j / 8][e]);
      sq[j / 8][e] = fmaf(S[j][e], q[j], j % 8 == 0 ? 0.f : sq[j / 8][e]);
    }
  }
  float vp[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float ske = sk[0][e], sqe = sq[0][e];
#pragma unroll
    for (int c = 1; c < R / 8; ++c) {
      ske += sk[c][e];
      sqe += sq[c][e];
    }
    vp[e] = beta * (v[e] - sum_groups<KG, R>(ske));
    o[e] = a.scale * fmaf(vp[e], kq, sum_groups<KG, R>(sqe));
  }
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) S[j][e] = fmaf(k[j], vp[e], S[j][e]);
  }
}

/// 4 consecutive state elements of storage type ST (aligned to 4 elements), stored from f32 with a streaming store
/// (evict-first: each state element is written once per launch and not read again by it).
template <typename ST>
__device__ __forceinline__ void store_state4(ST* p, const float (&x)[4]) {
  using Raw = typename RawPack<4 * sizeof(ST)>::type;
  union {
    Raw raw;
    ST elems[4];
  } u;
#pragma unroll
  for (int e = 0; e < 4; ++e) u.elems[e] = from_float<ST>(x[e]);
  __stcs(reinterpret_cast<Raw*>(p), u.raw);
}

/// One unit of the fast kernel (sequence n, value head hv, column slice sl) as lane `lane` sees it.
template <int KG, typename ST>
struct WarpUnit {
  static constexpr int kLanesV = 32 / KG, kCols = 4 * kLanesV;
  int64_t n, hv, hk, sl, col;
  bool active;  ///< the lane's 4 columns are in range (V % 4 == 0: all 4 or none)
  SeqBounds sb;
  PoolSeq ps;     ///< pool form: the start slot (-1: padding) and a bad value to record
  const ST* src;  ///< the sequence's state (slot start or h0) for this head, or null (padding or no state)

  __device__ __forceinline__ WarpUnit(const DecodeArgs& a, const WarpParams& prm, int64_t unit, int lane) {
    const int64_t HV = a.geo.HV, KV = a.geo.K * a.V;
    int64_t nh, hr;
    prm.by_slices(unit, nh, sl);
    prm.by_hv(nh, n, hv);
    prm.by_group(hv, hk, hr);
    col = sl * kCols + (lane % kLanesV) * 4;
    active = col < a.V;
    sb = sequence_bounds(a.geo, n);
    ps = PoolSeq{-1, 0u, 0};
    src = nullptr;
    if (a.pool_form) {
      ps = pool_sequence(a, n, sb.eos - sb.bos);
      if (ps.start >= 0) src = static_cast<const ST*>(a.pool) + pool_offset(a, ps.start, hv, KV);
    } else if (a.h0) {
      src = static_cast<const ST*>(a.h0) + (n * HV + hv) * KV;
    }
  }
};

/// Shared-memory staging of the state: per warp two buffers (the current unit, the next one) of kRows x 32 slots of
/// 4 state elements; lane l uses slot l of each row (consecutive lanes, consecutive 8 / 16 bytes) and reads back only
/// what it copied itself (no warp synchronisation).
template <typename ST, int R>
using StagedRows = typename RawPack<4 * sizeof(ST)>::type[R][32];

/// Issues the asynchronous copies of the lane's kRows x 4 state elements at `src` (rows row0.., row stride V, column
/// col) into `buf`: the bytes are in flight without holding registers. Nothing when `src` is null or the lane is
/// past V.
template <typename ST, int R>
__device__ __forceinline__ void stage_state(const ST* src, int64_t V, int row0, int64_t col, bool active,
                                            StagedRows<ST, R>& buf, int lane) {
  if (!src || !active) return;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&buf[j][lane]));
    const ST* p = src + (row0 + j) * V + col;
    if constexpr (sizeof(ST) == 4) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(p) : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(p) : "memory");
    }
  }
}
__device__ __forceinline__ void stage_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Waits until every committed group but the most recent one is complete (the current unit's copies).
__device__ __forceinline__ void stage_wait_previous() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

/// Bytes of a unit's staged inputs: q and k rows of K <= 128 16-bit elements, its v slice of `cols`, and 16 for the
/// gates (stage_gates: the words holding g and beta).
__host__ __device__ constexpr int staged_input_bytes(int cols) { return 2 * 128 * 2 + cols * 2 + 16; }

/// The 4-byte-aligned word that holds element e of x (stage_gates_applies(): inside x's row).
__device__ __forceinline__ const void* gate_word(const GdnIn& x, int64_t e) {
  const std::uintptr_t size = x.dtype == DType::f32 ? 4 : 2;  // f32 or 16-bit (stage_gates_applies)
  const auto p = reinterpret_cast<std::uintptr_t>(x.data) + static_cast<std::uintptr_t>(e) * size;
  return reinterpret_cast<const void*>(p & ~static_cast<std::uintptr_t>(3));
}
/// Element e of x as f32 from the word that holds it (see gate_word).
__device__ __forceinline__ float gate_from_word(uint32_t bits, const GdnIn& x, int64_t e) {
  if (x.dtype == DType::f32) return __uint_as_float(bits);
  const uint32_t h = (bits >> (16 * (e & 1))) & 0xffffu;
  return x.dtype == DType::bf16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
}

/// Issues the copies of unit `u`'s first-token inputs into `buf`: [q row: K][k row: K][v slice: kCols] elements of
/// the 16-bit input dtype, in 16-byte pieces (lane l copies pieces l, l + 32, ...), then with `gates` the words
/// holding g and beta (lane 0; read by staged_gates). Nothing for padding or an empty sequence. The pieces are read by
/// every lane of the warp after the wait and a __syncwarp.
template <typename Unit>
__device__ __forceinline__ void stage_inputs(const DecodeArgs& a, const Unit& u, bool gates, unsigned char* buf,
                                             int lane) {
  if ((a.pool_form && u.ps.start < 0) || u.sb.eos <= u.sb.bos) return;
  const int qk = static_cast<int>(a.geo.K) * 2 / 16, vp = Unit::kCols * 2 / 16;
  const int64_t t = u.sb.bos;
  const char* q = static_cast<const char*>(a.q.data) + gdn::at(a.q, u.sb.batch, t, u.hk) * 2;
  const char* k = static_cast<const char*>(a.k.data) + gdn::at(a.k, u.sb.batch, t, u.hk) * 2;
  const char* v = static_cast<const char*>(a.v.data) + (gdn::at(a.v, u.sb.batch, t, u.hv) + u.sl * Unit::kCols) * 2;
  for (int p = lane; p < 2 * qk + vp; p += 32) {
    const char* src = p < qk ? q + p * 16 : p < 2 * qk ? k + (p - qk) * 16 : v + (p - 2 * qk) * 16;
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(buf + p * 16));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
  }
  if (gates && lane == 0) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(buf + (2 * a.geo.K + Unit::kCols) * 2));
    if (a.g.data) {
      const void* w = gate_word(a.g, gdn::at(a.g, u.sb.batch, t, u.hv));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(w) : "memory");
    }
    if (a.beta.data) {
      const void* w = gate_word(a.beta, gdn::at(a.beta, u.sb.batch, t, u.hv));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst + 4), "l"(w) : "memory");
    }
  }
}

/// The first token's g and beta of a unit from its staged inputs `in` (stage_inputs with gates), as token_gates gives
/// them (g 0 without gating, beta 1 without beta).
template <typename Unit>
__device__ __forceinline__ void staged_gates(const DecodeArgs& a, const Unit& u, const unsigned char* in, float& g,
                                             float& beta) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(in + (2 * a.geo.K + Unit::kCols) * 2);
  g = a.g.data ? gate_from_word(w[0], a.g, gdn::at(a.g, u.sb.batch, u.sb.bos, u.hv)) : 0.f;
  beta = a.beta.data ? gate_from_word(w[1], a.beta, gdn::at(a.beta, u.sb.batch, u.sb.bos, u.hv)) : 1.f;
}

/// N (4 or a multiple of 8) 16-bit elements of dtype `dt` (bf16 or f16) at p (shared memory, aligned to 2 N bytes up
/// to 16), as f32, in 8- or 16-byte loads.
template <int N>
__device__ __forceinline__ void read_staged(const unsigned char* p, DType dt, float (&x)[N]) {
  static_assert(N == 4 || N % 8 == 0, "4 or whole 16-byte pieces");
  uint32_t w[N / 2];
  if constexpr (N == 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(p);
    w[0] = r.x;
    w[1] = r.y;
  } else {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      const uint4 r = reinterpret_cast<const uint4*>(p)[c];
      w[4 * c] = r.x;
      w[4 * c + 1] = r.y;
      w[4 * c + 2] = r.z;
      w[4 * c + 3] = r.w;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t h = (w[i / 2] >> (16 * (i % 2))) & 0xffffu;
    x[i] = dt == DType::bf16 ? __uint_as_float(h << 16) : __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
  }
}

/// Prefetches the whole state of unit u's head (contiguous, K V elements) into the L2: one bulk prefetch by lane 0
/// of the warp that takes the head's slice 0 (nothing for padding or a sequence without state). A hint: no result
/// depends on it.
template <typename Unit>
__device__ __forceinline__ void prefetch_head_state(const Unit& u, unsigned bytes, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (lane == 0 && u.sl == 0 && u.src) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(u.src), "r"(bytes) : "memory");
  }
#endif
}

/// ST: storage type of the state read (the pool's dtype, else initial_state's; float when there is none).
/// Persistent warps: each walks its units (stride: all the warps of the grid); the state of its next unit is copied
/// into shared memory (cp.async) while the current one is computed and stored.
/// WB warps per block, at most 170 registers (12 warps per SM; the kernel takes 168).
template <int KG, int R, typename ST, int WB>
__global__ void __launch_bounds__(WB * 32, 12 / WB) decode_warp_kernel(const DecodeArgs a, const WarpParams prm) {
  using Unit = WarpUnit<KG, ST>;
  // dynamic shared memory: the staged state [WB][2], then the staged inputs [WB][2][kStagedInputBytes], allocated
  // only when staging (the other calls keep the shared memory, and so the L1 share, they had)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StagedRows<ST, R>(*staged)[2] = reinterpret_cast<StagedRows<ST, R>(*)[2]>(smem_raw);
  unsigned char* const staged_in_raw = smem_raw + WB * 2 * sizeof(StagedRows<ST, R>);
  constexpr int in_bytes = staged_input_bytes(Unit::kCols);
  const auto staged_in = [&](int w, int b) { return staged_in_raw + (w * 2 + b) * in_bytes; };
  pdl_wait();  // its dependents are released at its end (below)
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int kg = lane / Unit::kLanesV;
  const int64_t HV = a.geo.HV, V = a.V, KV = a.geo.K * V;
  const int64_t row0 = static_cast<int64_t>(kg) * R;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * WB;

  int64_t unit = static_cast<int64_t>(blockIdx.x) * WB + warp;
  if (unit < prm.units) {
    const Unit first(a, prm, unit, lane);
    stage_state<ST, R>(first.src, V, kg * R, first.col, first.active, staged[warp][0], lane);
    if (prm.stage_inputs) stage_inputs(a, first, prm.stage_gates, staged_in(warp, 0), lane);
  }
  stage_commit();
  for (int buf = 0; unit < prm.units; unit += stride, buf ^= 1) {
    const Unit u(a, prm, unit, lane);
    const int64_t n = u.n, hv = u.hv, hk = u.hk, col = u.col;
    const bool active = u.active;
    const SeqBounds sb = u.sb;
    const int64_t len = sb.eos - sb.bos;
    const bool padding = a.pool_form && u.ps.start < 0;  // o rows 0, nothing read or written
    const HeadGate hg = head_gate(a, hv);
    float q[R], k[R], v[4] = {0.f, 0.f, 0.f, 0.f}, g = 0.f, beta = 0.f;
    const auto load_token = [&](int64_t t) {
      load_rows(a.q.data, a.q.dtype, gdn::at(a.q, sb.batch, t, hk) + row0, prm.q_vec, q);
      load_rows(a.k.data, a.k.dtype, gdn::at(a.k, sb.batch, t, hk) + row0, prm.k_vec, k);
      if (active) load4(a.v.data, a.v.dtype, gdn::at(a.v, sb.batch, t, hv) + col, 4, prm.v_vec, v);
      token_gates(a, hg, sb.batch, t, hv, g, beta);
    };
    // With staged inputs the first token's q / k / v came with this unit's state: only the gates are loaded here.
    // Otherwise they are loaded before the next unit is staged, so that their latency overlaps that of the next
    // unit's pool slot (the staging waits for it).
    const bool staged_first = prm.stage_inputs && !padding && len > 0;
    if (staged_first) {
      if (!prm.stage_gates) token_gates(a, hg, sb.batch, sb.bos, hv, g, beta);
    } else if (!padding && len > 0) {
      load_token(sb.bos);
    }
    if (unit + stride < prm.units) {  // the next unit's state (and inputs) in flight during this one
      const Unit next(a, prm, unit + stride, lane);
      stage_state<ST, R>(next.src, V, kg * R, next.col, next.active, staged[warp][buf ^ 1], lane);
      if (prm.stage_inputs) stage_inputs(a, next, prm.stage_gates, staged_in(warp, buf ^ 1), lane);
    }
    stage_commit();
    if (staged_first) {
      stage_wait_previous();  // this unit's copies (state and inputs), committed one group earlier
      __syncwarp();           // the pieces other lanes copied
      const unsigned char* in = staged_in(warp, buf);
      read_staged(in + row0 * 2, a.q.dtype, q);
      read_staged(in + (a.geo.K + row0) * 2, a.q.dtype, k);
      if (active) read_staged(in + (2 * a.geo.K + (lane % Unit::kLanesV) * 4) * 2, a.q.dtype, v);
      if (prm.stage_gates) staged_gates(a, u, in, g, beta);
    }
    const bool leader = hv == 0 && u.sl == 0 && lane == 0;  // records bad device values once per sequence
    if (sb.bad && leader) record_device_error(prm.errors, a.geo.cu_site, n);
    if (a.geo.cu_tail && n + 1 == a.geo.N && kg == 0 && active) zero_o_rows(a, 0, sb.eos, a.geo.T, hv, col, 4, prm.o_vec);
    if (a.pool_form) {
      if (u.ps.bad_site && leader) record_device_error(prm.errors, u.ps.bad_site, u.ps.bad_index);
      if (padding) {
        if (kg == 0 && active) zero_o_rows(a, sb.batch, sb.bos, sb.eos, hv, col, 4, prm.o_vec);
        continue;
      }
    }
    // the staged state, taken once the first token's inputs are loaded and reduced (their latency overlaps the copy)
    float S[R][4];
    const auto take_state = [&] {
      stage_wait_previous();  // this unit's copies (committed one group earlier) have landed
      if (u.src && active) {
#pragma unroll
        for (int j = 0; j < R; ++j) {
          union {
            typename RawPack<4 * sizeof(ST)>::type raw;
            ST elems[4];
          } x;
          x.raw = staged[warp][buf][j][lane];
#pragma unroll
          for (int e = 0; e < 4; ++e) S[j][e] = to_float(x.elems[e]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < R; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) S[j][e] = 0.f;
        }
      }
    };
    if (len == 0) take_state();  // an empty sequence: its final state is the initial one

    for (int64_t t = sb.bos; t < sb.eos; ++t) {
      if (t > sb.bos) load_token(t);
      const float kq = token_norms<KG, R>(a, q, k);
      if (t == sb.bos) take_state();
      float o[4];
      token_update<KG, R>(a, S, q, k, v, g, beta, kq, o);
      if (kg == 0 && active) store4(a.o.data, a.o.dtype, gdn::at(a.o, sb.batch, t, hv) + col, 4, prm.o_vec, o);
      if (a.pool_form) {
        const int64_t slot = write_slot(a, u.ps.start, n, t - sb.bos, len, leader, prm.errors);
        if (slot >= 0 && active) {
          ST* dst = static_cast<ST*>(a.pool) + pool_offset(a, slot, hv, KV);
#pragma unroll
          for (int j = 0; j < R; ++j) store_state4(dst + (row0 + j) * V + col, S[j]);
        }
      }
    }
    if (a.ht && active) {
      float* dst = a.ht + (n * HV + hv) * KV;
#pragma unroll
      for (int j = 0; j < R; ++j) store_state4(dst + (row0 + j) * V + col, S[j]);
    }
    // The head two units ahead (the next one is staged already): its state arrives in the L2 as whole contiguous
    // runs, so that its staging copies, 64-byte row pieces, hit the L2 rather than DRAM. Placed after the stores:
    // found here, the pool slot's load is off the unit's chain (measured: placed after the staging, 0.99x the time
    // without; here 0.96-0.98x at N = 256).
    if (prm.l2_prefetch && unit + 2 * stride < prm.units) {
      prefetch_head_state(Unit(a, prm, unit + 2 * stride, lane), prm.prefetch_bytes, lane);
    }
  }
  // The next kernel launches once each block has a warp done here, not at this kernel's start: launched early (in
  // the bench, the next decode step's grid, one wave of warps like this one), its blocks wait on the SMs this grid
  // frees first, and the decode measured 1.02-1.03x slower on the four gdn-decode cases (bench/results/h200/gdn.md,
  // thirty-fifth session; docs/ops/gdn-log.md, "Where the intra kernels release fwd_h"). The next kernel's wait for this
  // grid's completion and its memory is the same either way.
  pdl_release();
  asm volatile("cp.async.wait_all;" ::: "memory");  // no copy outlives the kernel (the last ones are empty)
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
/// The pool's base 16-byte aligned and its slots whole 16-byte steps apart (or no pool).
bool pool_aligned16(const DecodeArgs& a) {
  return aligned16(a.pool) && (a.pool_stride_s * static_cast<int64_t>(dtype_size(a.pool_dtype))) % 16 == 0;
}

/// 16-byte aligned pointer and strides of whole 16-byte steps: every kRows-element run at a multiple of 8 elements
/// loads in 16-byte pieces.
bool rows_vec(const GdnIn& x) {
  const int64_t step = 16 / static_cast<int64_t>(dtype_size(x.dtype));
  return aligned16(x.data) && x.stride_b % step == 0 && x.stride_t % step == 0 && x.stride_h % step == 0;
}

/// Whether the warp kernel stages the first token's q / k / v with the state (WarpParams::stage_inputs): q, k, v of
/// one 16-bit dtype, K <= 128, q / k rows in 16-byte pieces (rows_vec) and v slices of whole 16-byte pieces (V a
/// multiple of the slice width; pointer and strides multiples of 8 elements). FUSEOPS_GDN_DECODE_STAGE_INPUTS=0
/// switches it off (A/B).
bool stage_inputs_applies(const DecodeArgs& a, int kg) {
  static const bool off = env_switched_off("FUSEOPS_GDN_DECODE_STAGE_INPUTS");
  const DType dt = a.q.dtype;
  const int64_t cols = 128 / kg;
  return !off && (dt == DType::bf16 || dt == DType::f16) && a.k.dtype == dt && a.v.dtype == dt && a.geo.K <= 128 &&
         rows_vec(a.q) && rows_vec(a.k) && rows_vec(a.v) && a.V % cols == 0;
}

/// Whether the staged inputs also carry the first token's g and beta (WarpParams::stage_gates): given gates (not the
/// fused gating form), each absent, f32, or 16-bit with its 4-byte-aligned word inside the row (pointer 4-byte
/// aligned, heads contiguous, HV and the other strides even: the word pairs heads 2i, 2i + 1). cp.async copies 4
/// bytes at least, so a 16-bit gate travels with its neighbour. FUSEOPS_GDN_DECODE_STAGE_GATES=0 switches it off.
bool stage_gates_applies(const DecodeArgs& a) {
  static const bool off = env_switched_off("FUSEOPS_GDN_DECODE_STAGE_GATES");
  const auto words = [&](const GdnIn& x) {
    if (!x.data) return true;
    const bool aligned4 = reinterpret_cast<std::uintptr_t>(x.data) % 4 == 0;
    if (x.dtype == DType::f32) return aligned4;
    return (x.dtype == DType::bf16 || x.dtype == DType::f16) && aligned4 && x.stride_h == 1 && a.geo.HV % 2 == 0 &&
           x.stride_t % 2 == 0 && x.stride_b % 2 == 0;
  };
  return !off && !a.fused_gating && words(a.g) && words(a.beta);
}

/// Whether the warp kernel prefetches the state two units ahead into the L2 (WarpParams::l2_prefetch): sm_90 code and
/// more units than twice the resident warps (the grid is then the resident warps, and a warp whose unit has one two
/// strides ahead prefetches that unit's head). FUSEOPS_GDN_DECODE_L2_PREFETCH=0 switches it off (A/B).
std::atomic<bool> decode_l2_prefetch_off_for_testing{false};
bool l2_prefetch_applies(const DecodeArgs& a, int64_t units, int64_t resident_warps, int device) {
  static const bool off = env_switched_off("FUSEOPS_GDN_DECODE_L2_PREFETCH");
  const bool forced_off = decode_l2_prefetch_off_for_testing.load(std::memory_order_relaxed);
  return !off && !forced_off && is_sm90_or_newer(device) && units > 2 * resident_warps;
}

/// Row groups KG of the fast kernel for K (K = KG kRows), or 0 when K takes the fallback.
int fast_groups(int64_t K) {
  switch (K) {
    case 64: return 4;
    case 128: return 8;
    case 256: return 16;
    default: return 0;
  }
}

/// Testing hook (set_decode_rows_for_testing): 0 = the launch rule, 8 / 16 = that many rows per lane at K = 128.
std::atomic<int> decode_rows_for_testing{0};

/// A persistent grid of one fast-kernel variant (WB-warp blocks) for `a`: its parameters (slices, units, division
/// constants, input staging), dynamic shared memory, and the blocks that stay resident (the shared-memory carveout at
/// its maximum), which the grid does not exceed.
using WarpKernel = void (*)(const DecodeArgs, const WarpParams);
struct WarpGrid {
  WarpKernel kernel;
  int wb;
  WarpParams prm;
  std::size_t smem;
  int64_t resident;
  int64_t resident_warps() const { return resident * wb; }
};
/// cols: columns per unit; state_bytes: a warp's state buffers; state_size: bytes of a state element; kg: row groups
/// (input staging rule).
WarpGrid warp_grid(WarpKernel kernel, int wb, int64_t cols, std::size_t state_bytes, std::size_t state_size, int kg,
                   const DecodeArgs& a, WarpParams prm, int device, const char* op) {
  prm.slices = (a.V + cols - 1) / cols;
  prm.units = a.geo.N * a.geo.HV * prm.slices;
  prm.by_slices = FastDivmod(prm.slices);
  prm.by_hv = FastDivmod(a.geo.HV);
  prm.by_group = FastDivmod(a.geo.HV / a.geo.H);
  prm.stage_inputs = stage_inputs_applies(a, kg);
  prefer_carveout(kernel, cudaSharedmemCarveoutMaxShared, op);
  const std::size_t inputs = prm.stage_inputs ? 2 * staged_input_bytes(static_cast<int>(cols)) : 0;
  const std::size_t smem = wb * (state_bytes + inputs);
  allow_smem(kernel, smem, op);
  WarpGrid g{kernel, wb, prm, smem, resident_blocks(kernel, wb * 32, smem, device, op)};
  // gates staged only when each warp has at most one unit (its chain is the time; measured: N = 1 5.18 -> 5.05 us);
  // with more units the two 4-byte copies cost more than they hide (N = 256 308 -> 355 us)
  g.prm.stage_gates = prm.stage_inputs && stage_gates_applies(a) && prm.units <= g.resident_warps();
  g.prm.l2_prefetch = l2_prefetch_applies(a, prm.units, g.resident_warps(), device);
  g.prm.prefetch_bytes = static_cast<unsigned>(a.geo.K * a.V * static_cast<int64_t>(state_size));
  return g;
}
/// The (KG, R) decode_warp_kernel's grid in WB-warp blocks.
template <int KG, int R, typename ST, int WB>
WarpGrid slice_grid(const DecodeArgs& a, const WarpParams& prm, int device, const char* op) {
  return warp_grid(decode_warp_kernel<KG, R, ST, WB>, WB, WarpUnit<KG, ST>::kCols, 2 * sizeof(StagedRows<ST, R>),
                   sizeof(ST), KG, a, prm, device, op);
}
/// Launches a grid: at most one unit per resident warp.
void launch_warp_grid(const DecodeArgs& a, const WarpGrid& g, cudaStream_t s, int device) {
  const int64_t blocks = std::min((g.prm.units + g.wb - 1) / g.wb, g.resident);
  launch_kernel(g.kernel, dim3(gdn::grid_x(blocks)), dim3(g.wb * 32), g.smem, s, device, a, g.prm);
}
/// K = 128 (KG 8): 4-warp blocks (where they were measured) when the units fill their resident warps; else, when the
/// units of 16-row lanes in 2-warp blocks leave warps idle (a step of few sequences), lanes of 8 rows (KG 16: twice
/// the units, each warp's chain about half as long; FUSEOPS_GDN_DECODE_HALF_ROWS=0 turns this off); else 2-warp
/// blocks. Other K: 2-warp blocks of 16-row lanes. FUSEOPS_GDN_DECODE_WIDE_BLOCKS=0 keeps 2-warp blocks (A/B). Block
/// shape and rows per lane change which warps and lanes run what, not the arithmetic: results are the same bits.
template <int KG, typename ST>
void launch_warp_kernel_kg(const DecodeArgs& a, const WarpParams& prm, cudaStream_t s, int device, const char* op) {
  static const bool wide_blocks = !env_switched_off("FUSEOPS_GDN_DECODE_WIDE_BLOCKS");
  static const bool half_rows = !env_switched_off("FUSEOPS_GDN_DECODE_HALF_ROWS");
  if constexpr (KG == 8) {
    const int forced = decode_rows_for_testing.load(std::memory_order_relaxed);
    if (forced == 0 && wide_blocks) {
      const WarpGrid g = slice_grid<KG, kRows, ST, kWideWarpBlock>(a, prm, device, op);
      if (g.prm.units >= g.resident_warps()) return launch_warp_grid(a, g, s, device);
    }
    const WarpGrid full = slice_grid<KG, kRows, ST, kWarpBlock>(a, prm, device, op);
    if (forced == kHalfRows || (forced == 0 && half_rows && full.prm.units < full.resident_warps())) {
      return launch_warp_grid(a, slice_grid<16, kHalfRows, ST, kWarpBlock>(a, prm, device, op), s, device);
    }
    launch_warp_grid(a, full, s, device);
  } else {
    launch_warp_grid(a, slice_grid<KG, kRows, ST, kWarpBlock>(a, prm, device, op), s, device);
  }
}
template <typename ST>
void launch_warp_kernel(int kg, const DecodeArgs& a, const WarpParams& prm, cudaStream_t s, int device,
                        const char* op) {
  switch (kg) {
    case 4: launch_warp_kernel_kg<4, ST>(a, prm, s, device, op); break;
    case 8: launch_warp_kernel_kg<8, ST>(a, prm, s, device, op); break;
    default: launch_warp_kernel_kg<16, ST>(a, prm, s, device, op); break;
  }
}

}  // namespace

void set_decode_rows_for_testing(int rows) { decode_rows_for_testing.store(rows, std::memory_order_relaxed); }
void set_decode_l2_prefetch_off_for_testing(bool off) {
  decode_l2_prefetch_off_for_testing.store(off, std::memory_order_relaxed);
}

void fused_recurrent_gated_delta_rule(const DecodeArgs& a, int device, void* stream) {
  const char* op = a.fused_gating ? "fused_sigmoid_gating_delta_rule_update"
                   : a.pool_form  ? "fused_recurrent_gated_delta_rule_update"
                                  : "fused_recurrent_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  const int kg = fast_groups(a.geo.K);
  if (kg > 0 && a.V % 4 == 0 && pool_aligned16(a) && aligned16(a.h0) && aligned16(a.ht) && !a.beta_per_channel) {
    WarpParams prm{};  // slices, units and stage_inputs: per variant (launch_warp_kernel_wb)
    prm.q_vec = rows_vec(a.q);
    prm.k_vec = rows_vec(a.k);
    prm.v_vec = aligned16(a.v.data) && a.v.stride_b % 4 == 0 && a.v.stride_t % 4 == 0 && a.v.stride_h % 4 == 0;
    prm.o_vec = aligned16(a.o.data);
    prm.errors = cuda_error_record(device);
    const DType state_dtype = a.pool_form ? a.pool_dtype : a.h0 ? a.h0_dtype : DType::f32;
    with_float_type(state_dtype, [&](auto tag) {
      launch_warp_kernel<typename decltype(tag)::type>(kg, a, prm, s, device, op);
    });
  } else {
    DecodeParams prm{};
    prm.vblocks = (a.V + kBV - 1) / kBV;
    prm.units = a.geo.N * a.geo.HV * prm.vblocks;
    // (4-element vectors: 16 bytes of an f32 state, 8 of a bf16 one; an f16 state takes load4 / store4's scalar
    // path; the slots a whole number of vectors apart)
    prm.vec = a.V % 4 == 0 && aligned16(a.pool) && a.pool_stride_s % 4 == 0 && aligned16(a.h0) && aligned16(a.ht);
    prm.errors = cuda_error_record(device);
    launch_kernel(decode_kernel, dim3(gdn::grid_x(prm.units)), dim3(kThreads), 0, s, device, a, prm);
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
