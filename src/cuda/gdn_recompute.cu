// CUDA backend of recompute_w_u_fwd (w = A (beta e^g k), u = A (beta v) per chunk) and of the l2 normalisation of
// q and k used by chunk_gated_delta_rule (include/fuseops/gdn_forward.h; FLA `wy_fast.py`, `l2norm.py`).
//
// recompute_w_u, one 256-thread block per (chunk slot, value head), in one of two kernels:
// - recompute_w_u_mma_kernel (k, v, A, w, u all f16 or all bf16; any K, V, chunk size): the A tile (lower part with
//   the diagonal) with its columns scaled into A diag(beta e^g) and A diag(beta) (each rounded once to the input
//   dtype; FLA rounds beta e^g k and beta v instead), the raw k and v tiles in shared memory; m16n8k16 mma over the
//   lower-triangular blocks, fp32 accumulators, outputs staged in shared memory and stored as rows.
// - recompute_w_u_ffma_kernel (f32 and any mix of dtypes): fp32 FFMA in shared memory (no TF32), each output a sum
//   over j <= i in ascending order; the A tile (fp32) and one operand tile (beta e^g k, then beta v).
// l2norm: one row per warp (element form) or per L lanes (vector form); the forward's q and k pairs in one launch,
// with the chunk-local cumsum of g in the same launch where the pair takes the vector form (l2norm_cumsum_kernel).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/device_error.h"
#include "cuda/gdn_cumsum.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_wu.cuh"
#include "fuseops/error.h"
#include "fuseops/tensor.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;
using gdn::kLdA;
using gdn::lower_times;
using gdn::WuVec;

template <int BT>
__global__ void __launch_bounds__(kThreads) recompute_w_u_ffma_kernel(const WuArgs a, int64_t slots, int dmax,
                                                                 DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ float smem[];
  float* As = smem;                  // [BT][BT]
  float* X = As + BT * BT;           // [BT][dmax]
  __shared__ float beta_s[BT], eg_s[BT];
  __shared__ gdn::ChunkRef chunk;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t K = a.geo.K, V = a.V, group = a.geo.HV / a.geo.H;
  for (int64_t slot = blockIdx.x; slot < slots; slot += gridDim.x) {
    const gdn::ChunkRef ch = gdn::block_chunk<BT>(a.geo, slot, errors, chunk);
    if (ch.len == 0) continue;
    const int L = ch.len;
    for (int64_t hv = blockIdx.y; hv < a.geo.HV; hv += gridDim.y) {
      const int64_t hk = hv / group;
      __syncthreads();  // the previous head is done with the tiles
      for (int e = tid; e < BT * BT; e += kThreads) {
        const int i = e / BT, j = e % BT;
        As[e] = (i < L && j <= i) ? gdn::load_f(a.A.data, a.A.dtype, gdn::at(a.A, ch.batch, ch.t0 + i, hv) + j) : 0.f;
      }
      if (tid < L) {
        beta_s[tid] = gdn::load_f(a.beta.data, a.beta.dtype, gdn::at(a.beta, ch.batch, ch.t0 + tid, hv));
        eg_s[tid] = a.g.data ? expf(static_cast<const float*>(a.g.data)[gdn::at(a.g, ch.batch, ch.t0 + tid, hv)]) : 1.f;
      }
      __syncthreads();
      // w: operand beta e^g k (key head hk)
      for (int e = tid; e < L * K; e += kThreads) {
        const int j = static_cast<int>(e / K), c = static_cast<int>(e % K);
        X[j * dmax + c] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, ch.batch, ch.t0 + j, hk) + c) * beta_s[j] * eg_s[j];
      }
      __syncthreads();
      for (int e = tid; e < L * K; e += kThreads) {
        const int i = static_cast<int>(e / K), c = static_cast<int>(e % K);
        float s = 0.f;
        for (int j = 0; j <= i; ++j) s = fmaf(As[i * BT + j], X[j * dmax + c], s);
        gdn::store_f(a.w.data, a.w.dtype, gdn::at(a.w, ch.batch, ch.t0 + i, hv) + c, s);
      }
      __syncthreads();
      // u: operand beta v
      for (int e = tid; e < L * V; e += kThreads) {
        const int j = static_cast<int>(e / V), c = static_cast<int>(e % V);
        X[j * dmax + c] = gdn::load_f(a.v.data, a.v.dtype, gdn::at(a.v, ch.batch, ch.t0 + j, hv) + c) * beta_s[j];
      }
      __syncthreads();
      for (int e = tid; e < L * V; e += kThreads) {
        const int i = static_cast<int>(e / V), c = static_cast<int>(e % V);
        float s = 0.f;
        for (int j = 0; j <= i; ++j) s = fmaf(As[i * BT + j], X[j * dmax + c], s);
        gdn::store_f(a.u.data, a.u.dtype, gdn::at(a.u, ch.batch, ch.t0 + i, hv) + c, s);
      }
    }
  }
}

/// One warp per (b, t, h) row: y = x rstd, rstd = 1 / sqrt(sum x^2 + 1e-6) (FLA's l2norm_fwd). Element loads of any
/// dtype mix and layout; the vector form below takes the common layouts (it measured 400 us per call at 32768 x 16 x
/// 128 bf16, 0.67 TB/s, on the H200). x -> y only (l2norm_fwd launches it once per pair).
__global__ void __launch_bounds__(kThreads) l2norm_kernel(const L2NormArgs a, int64_t rows) {
  pdl_wait_and_release();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t K = a.geo.K;
  const GdnIn& x = a.x;
  const GdnOut& y = a.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * gdn::kWarps + threadIdx.x / 32; r < rows;
       r += static_cast<int64_t>(gridDim.x) * gdn::kWarps) {
    const int64_t h = r % a.geo.H, bt = r / a.geo.H, t = bt % a.geo.T, b = bt / a.geo.T;
    const int64_t src = gdn::at(x, b, t, h), dst = gdn::at(y, b, t, h);
    float s = 0.f;
    for (int64_t c = lane; c < K; c += 32) {
      const float v = gdn::load_f(x.data, x.dtype, src + c);
      s = fmaf(v, v, s);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    const float rstd = 1.0f / sqrtf(s + 1e-6f);
    for (int64_t c = lane; c < K; c += 32) {
      gdn::store_f(y.data, y.dtype, dst + c, gdn::load_f(x.data, x.dtype, src + c) * rstd);
    }
  }
}

/// Vector form of l2norm_kernel: L lanes per row (32 / L rows per warp), each lane NV 16-byte vectors of E = 16 /
/// sizeof(T) elements held in registers: x read once, the lane's squares summed in order then over the row's lanes by
/// xor shuffles, y = x rstd stored once. The loop runs per warp (every lane reaches the shuffles). Rows are numbered in
/// 32 bits (the launch takes the generic kernel from 2^31 rows): the row's (b, t, h) costs two 32-bit divisions (64-bit
/// ones made the kernel issue-bound: 88 us per call at 32768 x 16 x 128 bf16, 0.83 instructions per scheduler cycle,
/// DRAM 59% busy, on the H200).
template <typename T, int L, int NV>
__device__ void l2norm_vec_rows(const L2NormArgs& a, int rows, int total, int64_t block, int64_t blocks) {
  constexpr int E = static_cast<int>(16 / sizeof(T)), kRowsPerWarp = 32 / L;
  const int lane = static_cast<int>(threadIdx.x % 32), sub = lane % L;
  const unsigned H = static_cast<unsigned>(a.geo.H), T_ = static_cast<unsigned>(a.geo.T);
  // 64-bit row counter: total may be close to 2^31 and r0 + step past it
  const int64_t step = blocks * gdn::kWarps * kRowsPerWarp;
  for (int64_t r0 = (block * gdn::kWarps + threadIdx.x / 32) * kRowsPerWarp; r0 < total; r0 += step) {
    const int64_t r2 = r0 + lane / L;
    const bool ok = r2 < total, second = r2 >= rows;  // rows of the second pair follow the first's
    const unsigned ur = static_cast<unsigned>(second ? r2 - rows : r2), bt = ur / H, b = bt / T_;
    const int64_t h = ur - bt * H, t = bt - b * T_;
    const T* const src = static_cast<const T*>(second ? a.x2.data : a.x.data) +
                         (second ? gdn::at(a.x2, b, t, h) : gdn::at(a.x, b, t, h));
    FloatVec<T, E> v[NV];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      if (ok) {
        v[j].load(src + (j * L + sub) * E);
      } else {
#pragma unroll
        for (int i = 0; i < E; ++i) v[j].v[i] = 0.f;
      }
#pragma unroll
      for (int i = 0; i < E; ++i) s = fmaf(v[j].v[i], v[j].v[i], s);
    }
#pragma unroll
    for (int m = L / 2; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    const float rstd = 1.0f / sqrtf(s + 1e-6f);
    if (ok) {
      T* const dst = static_cast<T*>(second ? a.y2.data : a.y.data) +
                     (second ? gdn::at(a.y2, b, t, h) : gdn::at(a.y, b, t, h));
#pragma unroll
      for (int j = 0; j < NV; ++j) {
#pragma unroll
        for (int i = 0; i < E; ++i) v[j].v[i] = v[j].v[i] * rstd;
        v[j].store_whole(dst + (j * L + sub) * E);
      }
    }
  }
}

/// The vector form in its own launch.
template <typename T, int L, int NV>
__global__ void __launch_bounds__(kThreads) l2norm_vec_kernel(const L2NormArgs a, int rows, int total) {
  pdl_wait_and_release();
  l2norm_vec_rows<T, L, NV>(a, rows, total, blockIdx.x, gridDim.x);
}

/// Blocks per SM of the prologue kernel below: the full 2048 threads of the l2norm part, whose registers (29-40 in
/// l2norm_vec_kernel) would otherwise follow the cumsum part's (47-105 uncapped: 2-5 blocks per SM, measured 1.03-1.17x
/// the forward's time with the l2norm of 16 heads at 8192-32768 tokens on the H200).
constexpr int kL2NormBlocks = 8;
/// Heads per cumsum unit in the prologue kernel at chunk size BT: 4 loads in flight per lane fit in its registers (8
/// spilled 268 bytes at BT = 64).
__host__ __device__ constexpr int prologue_cumsum_heads(int BT) { return 128 / BT; }

/// The forward's prologue in one launch: blocks [0, cumsum_blocks) run chunk_local_cumsum's units (gdn_cumsum.cuh),
/// the others l2norm_vec_rows over q and k. Neither reads what the other writes; each part's values are those of its
/// own kernel (the same routines). Two kernels in a row cost the second one's launch and ramp after the first one's
/// tail (docs/ops/gdn-log.md, "The forward's prologue in one launch").
template <typename T, int L, int NV, int BT>
__global__ void __launch_bounds__(kThreads, kL2NormBlocks)
    l2norm_cumsum_kernel(const L2NormArgs a, int rows, int total, const CumsumArgs c, int64_t units, int64_t groups,
                         float scale, DeviceErrorRecord* errors, unsigned cumsum_blocks) {
  pdl_wait_and_release();
  if (blockIdx.x < cumsum_blocks) {
    constexpr int NH = prologue_cumsum_heads(BT);
    __shared__ float cumsum_buf[gdn::kWarps][BT * NH];
    gdn::cumsum_units<BT, NH>(c, units, groups, scale, errors, blockIdx.x, cumsum_blocks, cumsum_buf[threadIdx.x / 32]);
  } else {
    l2norm_vec_rows<T, L, NV>(a, rows, total, blockIdx.x - cumsum_blocks, gridDim.x - cumsum_blocks);
  }
}

/// The vector form where its layout applies: x and y (and x2, y2) of one dtype, a row of K elements a whole number of
/// 8, 16, 32 or 64 16-byte vectors (e.g. K 64 / 128 / 256 in f16 / bf16 or f32), 16-byte aligned bases and strides,
/// at most 2^31 - 1 rows in all. Calls f(tag of T, L, NV, rows per warp) with L and NV as std::integral_constant, and
/// returns true; returns false (f not called) otherwise.
template <typename F>
bool with_l2norm_vec(const L2NormArgs& a, int64_t total, F&& f) {
  if (a.x.dtype != a.y.dtype || total > INT32_MAX) return false;
  if (a.x2.data && (a.x2.dtype != a.x.dtype || a.y2.dtype != a.x.dtype)) return false;
  const int64_t es = static_cast<int64_t>(dtype_size(a.x.dtype)), ev = 16 / es;
  if ((a.geo.K * es) % 16 != 0) return false;
  auto vec_ok = [&](const void* data, int64_t sb, int64_t st, int64_t sh) {
    return reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && sb % ev == 0 && st % ev == 0 && sh % ev == 0;
  };
  if (!vec_ok(a.x.data, a.x.stride_b, a.x.stride_t, a.x.stride_h) ||
      !vec_ok(a.y.data, a.y.stride_b, a.y.stride_t, a.y.stride_h)) {
    return false;
  }
  if (a.x2.data && (!vec_ok(a.x2.data, a.x2.stride_b, a.x2.stride_t, a.x2.stride_h) ||
                    !vec_ok(a.y2.data, a.y2.stride_b, a.y2.stride_t, a.y2.stride_h))) {
    return false;
  }
  const int64_t nv = a.geo.K * es / 16;
  if (nv != 8 && nv != 16 && nv != 32 && nv != 64) return false;
  with_float_type(a.x.dtype, [&](auto tag) {
    using C1 = std::integral_constant<int, 1>;
    switch (nv) {
      case 8: f(tag, std::integral_constant<int, 8>{}, C1{}, 4); break;
      case 16: f(tag, std::integral_constant<int, 16>{}, C1{}, 2); break;
      case 32: f(tag, std::integral_constant<int, 32>{}, C1{}, 1); break;
      default: f(tag, std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{}, 1); break;
    }
  });
  return true;
}

/// Blocks of the vector form over `total` rows at `rows_per_warp`.
int64_t l2norm_vec_blocks(int64_t total, int rows_per_warp) {
  const int64_t per_block = int64_t{gdn::kWarps} * rows_per_warp;
  return (total + per_block - 1) / per_block;
}

bool launch_l2norm_vec(const L2NormArgs& a, int64_t rows, int64_t total, int device, cudaStream_t s) {
  return with_l2norm_vec(a, total, [&](auto tag, auto L, auto NV, int rows_per_warp) {
    using T = typename decltype(tag)::type;
    launch_kernel(l2norm_vec_kernel<T, decltype(L)::value, decltype(NV)::value>,
                  dim3(gdn::grid_x(l2norm_vec_blocks(total, rows_per_warp))), dim3(kThreads), 0, s, device, a,
                  static_cast<int>(rows), static_cast<int>(total));
  });
}

template <int BT>
void launch_wu_ffma(const WuArgs& a, int device, cudaStream_t s) {
  const char* op = "recompute_w_u_fwd";
  const int64_t slots = gdn::chunk_slots(a.geo);
  const int dmax = static_cast<int>(a.geo.K > a.V ? a.geo.K : a.V);
  const std::size_t smem = (static_cast<std::size_t>(BT) * BT + static_cast<std::size_t>(BT) * dmax) * sizeof(float);
  auto kernel = recompute_w_u_ffma_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(slots), gdn::grid_y(a.geo.HV)), dim3(kThreads), smem, s, device, a, slots,
                dmax, errors);
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-core kernel (f16 / bf16)

/// One block per (chunk slot, value head): shared A operands of w and u [BT][kLdA] (gdn::scale_inverse_columns), k and
/// v tiles [BT][ld] and the output staging tile [BT][ld], ld = dp + 8 with dp = max(K, V) rounded up to 32 (zero past
/// K / V and the chunk). Registers bounded for 3 blocks per SM (69 KB of shared memory each at BT = 64, K = V = 128;
/// no spills). The A operand of u (9 KB at BT = 64, since the fourteenth session) leaves fewer blocks per SM at BT = 64
/// where max(K, V) > 128: 2 instead of 3 at 160, 1 instead of 2 at 256 (not measured: the forward takes the fused
/// kernel; storing w and u from the accumulators, without the staging tile, would win the space back).
template <typename TK, int BT>
__global__ void __launch_bounds__(kThreads, 3)
    recompute_w_u_mma_kernel(const WuArgs a, int64_t slots, int dp, WuVec vec, DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int ld = dp + 8;
  TK* const As = reinterpret_cast<TK*>(smem_raw);  // A as loaded, then in place the A operand of w
  TK* const Au = As + BT * kLdA<BT>;                // the A operand of u
  TK* const Xk = Au + BT * kLdA<BT>;
  TK* const Xv = Xk + BT * ld;
  TK* const Os = Xv + BT * ld;
  __shared__ float colscale[2 * BT];  // beta e^g, then beta, of the rows (1 past the chunk)
  __shared__ gdn::ChunkRef chunk;
  const int tid = static_cast<int>(threadIdx.x);
  const int K = static_cast<int>(a.geo.K), V = static_cast<int>(a.V);
  const int64_t group = a.geo.HV / a.geo.H;
  for (int64_t slot = blockIdx.x; slot < slots; slot += gridDim.x) {
    const gdn::ChunkRef ch = gdn::block_chunk<BT>(a.geo, slot, errors, chunk);
    if (ch.len == 0) continue;
    const int L = ch.len;
    for (int64_t hv = blockIdx.y; hv < a.geo.HV; hv += gridDim.y) {
      const int64_t hk = hv / group;
      __syncthreads();  // the previous head is done with the tiles
      gdn::load_tile<TK, BT>(As, kLdA<BT>, BT, static_cast<const TK*>(a.A.data) + gdn::at(a.A, ch.batch, ch.t0, hv),
                             a.A.stride_t, L, BT, vec.A, kThreads);
      gdn::load_tile<TK, BT>(Xk, ld, dp, static_cast<const TK*>(a.k.data) + gdn::at(a.k, ch.batch, ch.t0, hk),
                             a.k.stride_t, L, K, vec.k, kThreads);
      gdn::load_tile<TK, BT>(Xv, ld, dp, static_cast<const TK*>(a.v.data) + gdn::at(a.v, ch.batch, ch.t0, hv),
                             a.v.stride_t, L, V, vec.v, kThreads);
      cp_async_commit();
      if (tid < BT) {
        const float b = tid < L ? gdn::load_f(a.beta.data, a.beta.dtype, gdn::at(a.beta, ch.batch, ch.t0 + tid, hv)) : 1.f;
        const float eg =
            tid < L && a.g.data ? expf(static_cast<const float*>(a.g.data)[gdn::at(a.g, ch.batch, ch.t0 + tid, hv)]) : 1.f;
        colscale[tid] = b * eg;
        colscale[BT + tid] = b;
      }
      cp_async_wait<0>();
      __syncthreads();
      // the inverse's columns scaled (what lies above the diagonal is loaded but replaced by 0); k and v stay as loaded
      gdn::scale_inverse_columns<TK, BT>(
          [&](int i, int j0, float(&f)[8]) {
            union {
              uint4 raw;
              TK e[8];
            } x;
            x.raw = *reinterpret_cast<const uint4*>(As + i * kLdA<BT> + j0);
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = to_float(x.e[e]);
          },
          As, Au, colscale, colscale + BT);
      __syncthreads();
      TK* const wdst = static_cast<TK*>(a.w.data) + gdn::at(a.w, ch.batch, ch.t0, hv);
      TK* const udst = static_cast<TK*>(a.u.data) + gdn::at(a.u, ch.batch, ch.t0, hv);
      lower_times<TK, BT>(As, Xk, ld, Os, L, K);
      __syncthreads();
      gdn::store_tile(wdst, a.w.stride_t, Os, ld, L, K, vec.w, kThreads);
      __syncthreads();
      lower_times<TK, BT>(Au, Xv, ld, Os, L, V);
      __syncthreads();
      gdn::store_tile(udst, a.u.stride_t, Os, ld, L, V, vec.u, kThreads);
    }
  }
}

template <typename TK, int BT>
void launch_wu_mma(const WuArgs& a, const WuVec& vec, int device, cudaStream_t s) {
  const char* op = "recompute_w_u_fwd";
  const int64_t slots = gdn::chunk_slots(a.geo);
  const int dp = static_cast<int>((std::max(a.geo.K, a.V) + 31) / 32 * 32);
  const std::size_t smem =
      (2 * static_cast<std::size_t>(BT) * kLdA<BT> + 3 * static_cast<std::size_t>(BT) * (dp + 8)) * 2;
  auto kernel = recompute_w_u_mma_kernel<TK, BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(slots), gdn::grid_y(a.geo.HV)), dim3(kThreads), smem, s, device, a, slots,
                dp, vec, errors);
}

/// The tensor-core path: k, v, A, w and u all in one 16-bit dtype (beta any). Returns false (nothing launched)
/// otherwise.
bool launch_wu_tc(const WuArgs& a, int device, cudaStream_t s) {
  const DType dt = a.k.dtype;
  if (a.v.dtype != dt || a.A.dtype != dt || a.w.dtype != dt || a.u.dtype != dt) return false;
  WuVec vec;
  vec.k = gdn::rows_16b(a.k, a.geo.K);
  vec.v = gdn::rows_16b(a.v, a.V);
  vec.A = gdn::rows_16b(a.A, a.geo.BT);
  vec.w = gdn::rows_16b(a.w, a.geo.K);
  vec.u = gdn::rows_16b(a.u, a.V);
  return gdn::with_16bit(dt, [&](auto tag) {
    using TK = decltype(tag);
    switch (a.geo.BT) {
      case 16: launch_wu_mma<TK, 16>(a, vec, device, s); break;
      case 32: launch_wu_mma<TK, 32>(a, vec, device, s); break;
      default: launch_wu_mma<TK, 64>(a, vec, device, s); break;
    }
  });
}

}  // namespace

void recompute_w_u_fwd(const WuArgs& a, int device, void* stream) {
  const char* op = "recompute_w_u_fwd";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.geo.BT != 16 && a.geo.BT != 32 && a.geo.BT != 64) {
    throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  if (!launch_wu_tc(a, device, s)) {
    switch (a.geo.BT) {
      case 16: launch_wu_ffma<16>(a, device, s); break;
      case 32: launch_wu_ffma<32>(a, device, s); break;
      default: launch_wu_ffma<64>(a, device, s); break;
    }
  }
  after_launch(op, s, device);
}

void l2norm_fwd(const L2NormArgs& a, int device, void* stream) {
  const char* op = "chunk_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t rows = a.geo.B * a.geo.T * a.geo.H;
  // both pairs in one vector-form launch where they can share it; else each pair on its own path
  if (!a.x2.data || !launch_l2norm_vec(a, rows, 2 * rows, device, s)) {
    L2NormArgs one = a;
    one.x2 = GdnIn{};
    one.y2 = GdnOut{};
    for (int pair = 0; pair < (a.x2.data ? 2 : 1); ++pair) {
      if (pair) {
        one.x = a.x2;
        one.y = a.y2;
      }
      if (!launch_l2norm_vec(one, rows, rows, device, s)) {
        launch_kernel(l2norm_kernel, dim3(gdn::grid_x((rows + gdn::kWarps - 1) / gdn::kWarps)), dim3(kThreads), 0,
                      s, device, one, rows);
      }
    }
  }
  after_launch(op, s, device);
}

namespace {
std::atomic<bool> l2norm_cumsum_off_for_testing{false};
std::atomic<int64_t> l2norm_cumsum_launches{0};
}  // namespace

bool l2norm_cumsum_fwd(const L2NormArgs& la, const CumsumArgs& ca, int device, void* stream) {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_L2NORM_CUMSUM");
  if (!allowed || l2norm_cumsum_off_for_testing.load(std::memory_order_relaxed) || !la.x2.data) return false;
  if (ca.geo.BT != 16 && ca.geo.BT != 32 && ca.geo.BT != 64) return false;
  const char* op = "chunk_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t rows = la.geo.B * la.geo.T * la.geo.H;
  const gdn::CumsumLaunch c = gdn::cumsum_launch(ca, prologue_cumsum_heads(static_cast<int>(ca.geo.BT)), op, device);
  // each part's grid-stride walk takes any count of blocks: both capped so that their sum fits in grid.x (2^31 - 1)
  constexpr int64_t kPartCap = INT_MAX / 2;
  const int64_t cumsum_blocks = std::min(kPartCap, (c.units + gdn::kWarps - 1) / gdn::kWarps);
  const bool launched = with_l2norm_vec(la, 2 * rows, [&](auto tag, auto L, auto NV, int rows_per_warp) {
    using T = typename decltype(tag)::type;
    const int64_t blocks = cumsum_blocks + std::min(kPartCap, l2norm_vec_blocks(2 * rows, rows_per_warp));
    auto go = [&](auto kernel) {
      launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s, device, la,
                    static_cast<int>(rows), static_cast<int>(2 * rows), ca, c.units, c.groups, c.scale, c.errors,
                    static_cast<unsigned>(cumsum_blocks));
    };
    constexpr int kL = decltype(L)::value, kNV = decltype(NV)::value;
    switch (ca.geo.BT) {
      case 16: go(l2norm_cumsum_kernel<T, kL, kNV, 16>); break;
      case 32: go(l2norm_cumsum_kernel<T, kL, kNV, 32>); break;
      default: go(l2norm_cumsum_kernel<T, kL, kNV, 64>); break;
    }
  });
  if (!launched) return false;
  l2norm_cumsum_launches.fetch_add(1, std::memory_order_relaxed);
  after_launch(op, s, device);
  return true;
}

void set_l2norm_cumsum_off_for_testing(bool off) {
  l2norm_cumsum_off_for_testing.store(off, std::memory_order_relaxed);
}
int64_t l2norm_cumsum_launches_for_testing() { return l2norm_cumsum_launches.load(std::memory_order_relaxed); }

}  // namespace fuseops::detail::cuda
