// CUDA backend of recompute_w_u_fwd (w = A (beta e^g k), u = A (beta v) per chunk) and of the l2 normalisation of
// q and k used by chunk_gated_delta_rule (include/fuseops/gdn_forward.h; reference/gdn.md §6).
//
// recompute_w_u, 256-thread blocks over the units (chunk slot, value head), in one of two kernels:
// - recompute_w_u_mma_kernel (k, v, A, w, u all f16 or all bf16; any K, V, chunk size): persistent blocks, the next
//   unit's tiles prefetched into a second stage; the A tile (lower part with the diagonal), beta e^g k and beta v
//   (rounded once to the input dtype, as FLA) in shared memory; m16n8k16 mma over the lower-triangular blocks, fp32
//   accumulators, outputs staged in shared memory and stored as rows.
// - recompute_w_u_ffma_kernel (f32 and any mix of dtypes): fp32 FFMA in shared memory (no TF32), each output a sum
//   over j <= i in ascending order; the A tile (fp32) and one operand tile (beta e^g k, then beta v).
// l2norm: one warp per row.
#include <cstdint>

#include "cuda/device_error.h"
#include "cuda/gdn_forward.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;

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

/// One warp per (b, t, h) row: y = x / sqrt(sum x^2 + 1e-6).
__global__ void __launch_bounds__(kThreads) l2norm_kernel(const L2NormArgs a, int64_t rows) {
  pdl_wait_and_release();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t K = a.geo.K;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * gdn::kWarps + threadIdx.x / 32; r < rows;
       r += static_cast<int64_t>(gridDim.x) * gdn::kWarps) {
    const int64_t h = r % a.geo.H, bt = r / a.geo.H, t = bt % a.geo.T, b = bt / a.geo.T;
    const int64_t src = gdn::at(a.x, b, t, h), dst = gdn::at(a.y, b, t, h);
    float s = 0.f;
    for (int64_t c = lane; c < K; c += 32) {
      const float x = gdn::load_f(a.x.data, a.x.dtype, src + c);
      s = fmaf(x, x, s);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    const float d = sqrtf(s + 1e-6f);
    for (int64_t c = lane; c < K; c += 32) {
      gdn::store_f(a.y.data, a.y.dtype, dst + c, gdn::load_f(a.x.data, a.x.dtype, src + c) / d);
    }
  }
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

/// Which tensors move as 16-byte rows (cp.async / vector stores).
struct WuVec {
  bool k, v, A, w, u;
};

/// Row stride of the BT x BT A tile (16-bit): 8 rows of an ldmatrix hit distinct banks.
template <int BT>
constexpr int kLdA = BT + 8;

/// Row i of X [BT][ld] (i < rows, columns < cols) times f1[i] (and f2[i]), rounded once to TK; one warp per row,
/// two columns per lane step (cols rounded up to even: the tile is zero there, and a column never reaches another).
template <typename TK>
__device__ void scale_rows(TK* X, int ld, int rows, int cols, const float* f1, const float* f2) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  for (int i = warp; i < rows; i += gdn::kWarps) {
    const float a = f1[i], b = f2 ? f2[i] : 1.f;
    for (int c = 2 * lane; c < cols; c += 64) {
      TK* const p = X + i * ld + c;
      const float x0 = to_float(p[0]) * a, x1 = to_float(p[1]) * a;
      *reinterpret_cast<uint32_t*>(p) = pack2<TK>(f2 ? x0 * b : x0, f2 ? x1 * b : x1);
    }
  }
}

/// O[i][c] = sum_{j <= i} A[i][j] X[j][c] for rows i < len and columns c < cols (rounded once to TK). Work items of
/// 16 rows x 32 columns are dealt to the warps, the row blocks in reverse order on odd rounds so that the triangle's
/// work is spread evenly; each sums over the blocks j0 <= i0 only (A is zero above the diagonal), ascending.
template <typename TK, int BT>
__device__ void lower_times(const TK* As, const TK* X, int ld, TK* O, int len, int cols) {
  constexpr int MB = BT / 16;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int qr = lane / 4, qc = 2 * (lane % 4);
  const int items = MB * ((cols + 31) / 32);
  for (int item = warp; item < items; item += gdn::kWarps) {
    const int r = item % MB;
    const int mi = (item / gdn::kWarps) % 2 ? MB - 1 - r : r, n0 = (item / MB) * 32;
    if (mi * 16 >= len) continue;  // warp-uniform
    float acc[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    const TK* const a_ptr = As + (mi * 16 + (lane & 15)) * kLdA<BT> + (lane >> 4) * 8;
    const TK* const b_ptr = X + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
    for (int kk = 0; kk <= mi * 16; kk += 16) {
      uint32_t af[4];
      ldmatrix_x4(af, a_ptr + kk);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_ptr + kk * ld + p * 16);
        mma_m16n8k16<TK>(acc[2 * p], af, b[0], b[1]);
        mma_m16n8k16<TK>(acc[2 * p + 1], af, b[2], b[3]);
      }
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      TK* const dst = O + (mi * 16 + qr) * ld + n0 + t * 8 + qc;
      *reinterpret_cast<uint32_t*>(dst) = pack2<TK>(acc[t][0], acc[t][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * ld) = pack2<TK>(acc[t][2], acc[t][3]);
    }
  }
}

/// Element i of a float tensor of dtype dt as raw bits, and their value: the load is issued here and waited for only
/// where raw_to_f() reads it (a thread that converted at once would stall its warp for the load's latency).
__device__ __forceinline__ uint32_t load_raw(const void* p, DType dt, int64_t i) {
  if (dt == DType::f16 || dt == DType::bf16) return static_cast<const unsigned short*>(p)[i];
  return static_cast<const uint32_t*>(p)[i];
}
__device__ __forceinline__ float raw_to_f(uint32_t r, DType dt) {
  switch (dt) {
    case DType::f16: return __half2float(__ushort_as_half(static_cast<unsigned short>(r)));
    case DType::bf16: return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(r)));
    default: return __uint_as_float(r);
  }
}

/// Shared-memory elements of one pipeline stage of recompute_w_u_mma_kernel: the A tile [BT][kLdA] and the beta e^g k
/// and beta v tiles [BT][ld].
template <int BT>
__host__ __device__ constexpr int wu_stage_elems(int ld) {
  return BT * kLdA<BT> + 2 * BT * ld;
}

/// Persistent blocks (as many as are resident) walk the units (chunk slot, value head), value heads innermost so
/// that the blocks working side by side share the chunk's k rows (L2). Two pipeline stages: while a block computes
/// unit n from one stage, the 16-byte cp.async copies of unit n + gridDim.x (A, k, v) and its beta and g loads are in
/// flight into the other. Stage: A tile [BT][kLdA], beta e^g k and beta v tiles [BT][ld]; plus one output staging
/// tile [BT][ld], ld = dp + 8 with dp = max(K, V) rounded up to 32 (zero past K / V and the chunk). 105 KB of shared
/// memory at BT = 64, K = V = 128: two blocks per SM, each with ~40 KB of loads in flight while it computes
/// (registers bounded for three, which fit at BT = 16 / 32; no spills).
template <typename TK, int BT>
__global__ void __launch_bounds__(kThreads, 3)
    recompute_w_u_mma_kernel(const WuArgs a, int64_t units, int dp, WuVec vec, DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int ld = dp + 8;
  TK* const base = reinterpret_cast<TK*>(smem_raw);
  TK* const Os = base + 2 * wu_stage_elems<BT>(ld);
  __shared__ float beta_s[2][BT], eg_s[2][BT];
  __shared__ gdn::ChunkRef chunk_s[2];
  const int tid = static_cast<int>(threadIdx.x);
  const int K = static_cast<int>(a.geo.K), V = static_cast<int>(a.V);
  const int64_t HV = a.geo.HV, group = HV / a.geo.H;
  // Resolves unit u's chunk into chunk_s[st] (warp 0; all threads pass the barrier that follows in the caller).
  auto resolve = [&](int64_t u, int st) {
    if (tid < 32) {
      const gdn::ChunkRef c = u < units ? gdn::resolve_chunk<BT>(a.geo, u / HV, errors, u % HV == 0)
                                        : gdn::ChunkRef{0, 0, 0};
      if (tid == 0) chunk_s[st] = c;
    }
  };
  // Issues unit u's copies into stage st (one commit group, empty when the chunk is) and the loads of beta and g of
  // row tid (raw bits, in flight until the caller converts them into shared memory; 0 past the chunk).
  auto issue = [&](int64_t u, int st, uint32_t& beta_r, uint32_t& g_r) {
    const gdn::ChunkRef ch = chunk_s[st];
    beta_r = 0u;
    g_r = 0u;
    if (ch.len > 0) {
      const int64_t hv = u % HV, hk = hv / group;
      TK* const As = base + st * wu_stage_elems<BT>(ld);
      TK* const Xk = As + BT * kLdA<BT>;
      TK* const Xv = Xk + BT * ld;
      gdn::load_tile<TK, BT>(As, kLdA<BT>, BT, static_cast<const TK*>(a.A.data) + gdn::at(a.A, ch.batch, ch.t0, hv),
                             a.A.stride_t, ch.len, BT, vec.A, kThreads);
      gdn::load_tile<TK, BT>(Xk, ld, dp, static_cast<const TK*>(a.k.data) + gdn::at(a.k, ch.batch, ch.t0, hk),
                             a.k.stride_t, ch.len, K, vec.k, kThreads);
      gdn::load_tile<TK, BT>(Xv, ld, dp, static_cast<const TK*>(a.v.data) + gdn::at(a.v, ch.batch, ch.t0, hv),
                             a.v.stride_t, ch.len, V, vec.v, kThreads);
      if (tid < ch.len) {
        beta_r = load_raw(a.beta.data, a.beta.dtype, gdn::at(a.beta, ch.batch, ch.t0 + tid, hv));
        if (a.g.data) g_r = load_raw(a.g.data, DType::f32, gdn::at(a.g, ch.batch, ch.t0 + tid, hv));
      }
    }
    cp_async_commit();
  };
  int64_t unit = blockIdx.x;
  int st = 0;
  uint32_t beta_r, g_r;
  // beta and e^g (1 without g) of row tid into stage t's shared rows
  auto put_gates = [&](int t) {
    if (tid < BT) {
      beta_s[t][tid] = raw_to_f(beta_r, a.beta.dtype);
      eg_s[t][tid] = a.g.data ? expf(__uint_as_float(g_r)) : 1.f;
    }
  };
  resolve(unit, 0);
  __syncthreads();
  issue(unit, 0, beta_r, g_r);
  put_gates(0);
  for (; unit < units; unit += gridDim.x, st ^= 1) {
    // The barrier ending the previous unit (or the prologue's) separates the other stage's last reads from these
    // writes.
    resolve(unit + gridDim.x, st ^ 1);
    __syncthreads();
    issue(unit + gridDim.x, st ^ 1, beta_r, g_r);
    const gdn::ChunkRef ch = chunk_s[st];
    const int L = ch.len;
    cp_async_wait<1>();  // this unit's group (the next unit's may still be in flight)
    __syncthreads();
    if (L > 0) {  // block-uniform
      const int64_t hv = unit % HV;
      TK* const As = base + st * wu_stage_elems<BT>(ld);
      TK* const Xk = As + BT * kLdA<BT>;
      TK* const Xv = Xk + BT * ld;
      for (int e = tid; e < BT * BT; e += kThreads) {  // only the lower triangle with the diagonal is read
        const int i = e / BT, j = e % BT;
        if (j > i) As[i * kLdA<BT> + j] = from_float<TK>(0.f);
      }
      scale_rows(Xk, ld, L, K, beta_s[st], eg_s[st]);  // (k beta) e^g, as the FFMA kernel and FLA
      scale_rows(Xv, ld, L, V, beta_s[st], static_cast<const float*>(nullptr));
      __syncthreads();
      TK* const wdst = static_cast<TK*>(a.w.data) + gdn::at(a.w, ch.batch, ch.t0, hv);
      TK* const udst = static_cast<TK*>(a.u.data) + gdn::at(a.u, ch.batch, ch.t0, hv);
      lower_times<TK, BT>(As, Xk, ld, Os, L, K);
      __syncthreads();
      gdn::store_tile(wdst, a.w.stride_t, Os, ld, L, K, vec.w, kThreads);
      __syncthreads();
      lower_times<TK, BT>(As, Xv, ld, Os, L, V);
      __syncthreads();
      gdn::store_tile(udst, a.u.stride_t, Os, ld, L, V, vec.u, kThreads);
    }
    put_gates(st ^ 1);
    __syncthreads();  // this stage and Os are free; the next stage's beta and e^g are visible
  }
  cp_async_wait<0>();
}

template <typename TK, int BT>
void launch_wu_mma(const WuArgs& a, const WuVec& vec, int device, cudaStream_t s) {
  const char* op = "recompute_w_u_fwd";
  const int64_t units = gdn::chunk_slots(a.geo) * a.geo.HV;
  const int dp = static_cast<int>((std::max(a.geo.K, a.V) + 31) / 32 * 32);
  const std::size_t smem = (2 * static_cast<std::size_t>(wu_stage_elems<BT>(dp + 8)) +
                            static_cast<std::size_t>(BT) * (dp + 8)) * sizeof(TK);
  auto kernel = recompute_w_u_mma_kernel<TK, BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  const int64_t grid = std::min(units, resident_blocks(kernel, kThreads, smem, device, op));
  launch_kernel(kernel, dim3(gdn::grid_x(grid)), dim3(kThreads), smem, s, device, a, units, dp, vec, errors);
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
  launch_kernel(l2norm_kernel, dim3(gdn::grid_x((rows + gdn::kWarps - 1) / gdn::kWarps)), dim3(kThreads), 0, s, device,
                a, rows);
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
