// CUDA backend of the decode ops: fused_recurrent_gated_delta_rule (FLA form), fused_recurrent_gated_delta_rule_update
// (state pool) and fused_sigmoid_gating_delta_rule_update (gates from the raw projections); one kernel, the form is
// chosen by the arguments (include/fuseops/gdn_forward.h; reference/gdn.md §11).
//
// A bandwidth problem: per (sequence, value head) the fp32 state is read once and written once. One 256-thread block
// per (sequence, value head, block of 32 state columns); the state slice stays in registers for all the sequence's
// tokens: lane l of warp w holds columns 4 (l % 8) .. 4 (l % 8) + 3 of the rows r = 4 w + l / 8 + 32 j (j < 8, K <=
// 256), so one warp-wide access covers 4 rows x 128 contiguous bytes. Per token:
//   S *= exp(g); (S^T k, S^T q) reduced over K (shuffles over the 4 row lanes, then the 8 warps through shared
//   memory, fixed order); v' = beta (v - S^T k); S += k v'^T; o = scale (S^T q + v' (k . q)) (= scale S_new^T q).
// Sums run in a fixed order: results do not depend on the other sequences of the batch.
#include <cstdint>

#include "cuda/device_error.cuh"
#include "cuda/gdn_forward.cuh"
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

struct DecodeParams {
  int64_t vblocks, units;
  bool vec;  ///< V % 4 == 0 and the state tensors 16-byte aligned
  DeviceErrorRecord* errors;
};

__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeArgs a, const DecodeParams prm) {
  pdl_wait_and_release();
  __shared__ float qs[256], ks[256], vs[kBV];
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
    const int64_t len = sb.eos - sb.bos;
    float S[kMaxRows][4];
    if (a.pool) {
      const PoolSeq ps = pool_sequence(a, n, len);
      if (ps.bad_site && leader) record_device_error(prm.errors, ps.bad_site, ps.bad_index);
      if (ps.start < 0) {  // padding: o rows 0, nothing read or written
        if (warp == 0 && lane < 8) {
          const float z[4] = {0.f, 0.f, 0.f, 0.f};
          for (int64_t t = sb.bos; t < sb.eos; ++t) {
            store4(a.o.data, a.o.dtype, gdn::at(a.o, sb.batch, t, hv) + col, ncols, false, z);
          }
        }
        continue;
      }
      const int64_t base = (ps.start * HV + hv) * KV;
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
    float A = 0.f, bias = 0.f;
    if (a.fused_gating) {
      A = expf(gdn::load_f(a.A_log.data, a.A_log.dtype, hv * a.A_log.stride_h));
      bias = gdn::load_f(a.dt_bias.data, a.dt_bias.dtype, hv * a.dt_bias.stride_h);
    }

    for (int64_t t = sb.bos; t < sb.eos; ++t) {
      __syncthreads();  // the previous token (or unit) is done with the shared buffers
      for (int64_t e = tid; e < K; e += kThreads) {
        qs[e] = gdn::load_f(a.q.data, a.q.dtype, gdn::at(a.q, sb.batch, t, hk) + e);
        ks[e] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, sb.batch, t, hk) + e);
      }
      if (tid < kBV) {
        const int64_t c = vb * kBV + tid;
        vs[tid] = c < V ? gdn::load_f(a.v.data, a.v.dtype, gdn::at(a.v, sb.batch, t, hv) + c) : 0.f;
      }
      if (tid == kBV) {
        float g, beta;
        if (a.fused_gating) {
          const float x = gdn::load_f(a.a.data, a.a.dtype, gdn::at(a.a, sb.batch, t, hv)) + bias;
          g = -A * softplus_gate(x, a.softplus_beta, a.softplus_threshold);
          beta = sigmoid_gate(gdn::load_f(a.b.data, a.b.dtype, gdn::at(a.b, sb.batch, t, hv)));
        } else {
          g = a.g.data ? gdn::load_f(a.g.data, a.g.dtype, gdn::at(a.g, sb.batch, t, hv)) : 0.f;
          beta = a.beta.data ? gdn::load_f(a.beta.data, a.beta.dtype, gdn::at(a.beta, sb.batch, t, hv)) : 1.f;
        }
        scal[0] = g;
        scal[1] = beta;
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
      const float qd = a.l2norm ? sqrtf(scal[2] + 1e-6f) : 1.f, kd = a.l2norm ? sqrtf(scal[3] + 1e-6f) : 1.f;
      const float decay = expf(scal[0]), beta = scal[1];
      float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        const float kr = r < K ? ks[r] / kd : 0.f, qr = r < K ? qs[r] / qd : 0.f;
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
      const float kq = scal[4] / (qd * kd);
      float vp[4], o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float tk = 0.f, tq = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          tk += red[w][vl * 4 + e][0];
          tq += red[w][vl * 4 + e][1];
        }
        vp[e] = beta * (vs[vl * 4 + e] - tk);
        o[e] = a.scale * fmaf(vp[e], kq, tq);
      }
#pragma unroll
      for (int j = 0; j < kMaxRows; ++j) {
        const int64_t r = rgi + 32 * j;
        const float kr = r < K ? ks[r] / kd : 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][e] = fmaf(kr, vp[e], S[j][e]);
      }
      if (warp == 0 && lane < 8) store4(a.o.data, a.o.dtype, gdn::at(a.o, sb.batch, t, hv) + col, ncols, false, o);
      if (a.pool) {
        bool bad = false;
        const int64_t slot = pool_write_slot(a, n, t - sb.bos, len, &bad);
        if (bad && leader) {
          record_device_error(prm.errors, a.idx_site, a.idx_cols > 0 ? n * a.idx_cols + (t - sb.bos) : n);
        }
        if (slot >= 0) {
          const int64_t base = (slot * HV + hv) * KV;
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

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void fused_recurrent_gated_delta_rule(const DecodeArgs& a, int device, void* stream) {
  const char* op = a.fused_gating ? "fused_sigmoid_gating_delta_rule_update"
                   : a.pool       ? "fused_recurrent_gated_delta_rule_update"
                                  : "fused_recurrent_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  DecodeParams prm{};
  prm.vblocks = (a.V + kBV - 1) / kBV;
  prm.units = a.geo.N * a.geo.HV * prm.vblocks;
  prm.vec = a.V % 4 == 0 && aligned16(a.pool) && aligned16(a.h0) && aligned16(a.ht);
  prm.errors = cuda_error_record(device);
  launch_kernel(decode_kernel, dim3(gdn::grid_x(prm.units)), dim3(kThreads), 0, s, device, a, prm);
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
