// CUDA backend of recompute_w_u_fwd (w = A (beta e^g k), u = A (beta v) per chunk) and of the l2 normalisation of
// q and k used by chunk_gated_delta_rule (include/fuseops/gdn_forward.h; reference/gdn.md §6).
//
// recompute_w_u: one 256-thread block per (chunk slot, value head); fp32 FFMA in shared memory, each output a sum
// over j <= i in ascending order. The A tile (lower part with the diagonal, fp32) and one operand tile (beta e^g k,
// then beta v) live in shared memory. l2norm: one warp per row.
#include <cstdint>

#include "cuda/device_error.h"
#include "cuda/gdn_forward.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;

template <int BT>
__global__ void __launch_bounds__(kThreads) recompute_w_u_kernel(const WuArgs a, int64_t slots, int dmax,
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
    __syncthreads();
    if (tid < 32) {
      const gdn::ChunkRef c = gdn::resolve_chunk<BT>(a.geo, slot, errors, blockIdx.y == 0);
      if (tid == 0) chunk = c;
    }
    __syncthreads();
    const gdn::ChunkRef ch = chunk;
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
void launch_wu(const WuArgs& a, int device, cudaStream_t s) {
  const char* op = "recompute_w_u_fwd";
  const int64_t slots = gdn::chunk_slots(a.geo);
  const int dmax = static_cast<int>(a.geo.K > a.V ? a.geo.K : a.V);
  const std::size_t smem = (static_cast<std::size_t>(BT) * BT + static_cast<std::size_t>(BT) * dmax) * sizeof(float);
  auto kernel = recompute_w_u_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(slots), gdn::grid_y(a.geo.HV)), dim3(kThreads), smem, s, device, a, slots,
                dmax, errors);
}

}  // namespace

void recompute_w_u_fwd(const WuArgs& a, int device, void* stream) {
  const char* op = "recompute_w_u_fwd";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (a.geo.BT) {
    case 16: launch_wu<16>(a, device, s); break;
    case 32: launch_wu<32>(a, device, s); break;
    case 64: launch_wu<64>(a, device, s); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
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
