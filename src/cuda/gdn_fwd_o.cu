// CUDA backend of chunk_fwd_o (include/fuseops/gdn_forward.h; FLA `fla/ops/common/chunk_o.py`):
//   o_i = scale (exp(g_i) q_i^T h[chunk] + sum_{j <= i} (q_i . k_j) exp(g_i - g_j) v_new_j).
// Two variants: q, k, v_new and h all f16 or all bf16 -> tensor cores (gdn_fwd_o_mma.cu, every shape); anything else
// (f32 inputs, mixed dtypes) -> the FFMA kernel below (fp32, no TF32).
// FFMA kernel: one 256-thread block per (chunk slot, value head, block of kBV = 32 columns of V). The chunk's q and k rows (fp32),
// the gated causal score tile P [BT][BT] and the block's columns of h and v_new are staged in shared memory; thread
// (rg = tid / 32, c = tid % 32) computes column c of the rows rg, rg + 8, ... fp32 FFMA, fixed summation order.
#include <cstdint>

#include "cuda/gdn_forward.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;
constexpr int kBV = 32;
constexpr int kRowGroups = kThreads / kBV;

template <int BT>
__global__ void __launch_bounds__(kThreads) fwd_o_ffma_kernel(const FwdOArgs a, int64_t slots, int64_t vblocks,
                                                         DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ float smem[];
  const int K = static_cast<int>(a.geo.K);
  const int ldk = K + 1;       // odd row stride: the rows of one warp's k reads fall in distinct banks
  float* qs = smem;            // [BT][ldk]
  float* ks = qs + BT * ldk;   // [BT][ldk]
  float* hs = ks + BT * ldk;   // [K][kBV]
  float* vs = hs + K * kBV;    // [BT][kBV]
  float* P = vs + BT * kBV;    // [BT][BT]
  __shared__ float gs[BT];
  __shared__ gdn::ChunkRef chunk;
  const int tid = static_cast<int>(threadIdx.x), c = tid % kBV, rg = tid / kBV;
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V, group = HV / a.geo.H;
  const int64_t units = HV * vblocks;
  for (int64_t slot = blockIdx.x; slot < slots; slot += gridDim.x) {
    __syncthreads();
    if (tid < 32) {
      const gdn::ChunkRef ch = gdn::resolve_chunk<BT>(a.geo, slot, errors, blockIdx.y == 0);
      if (tid == 0) chunk = ch;
    }
    __syncthreads();
    const gdn::ChunkRef ch = chunk;
    if (ch.len == 0) continue;
    const int L = ch.len;
    const int64_t hslot = gdn::state_slot(a.geo, slot, ch);
    for (int64_t u = blockIdx.y; u < units; u += gridDim.y) {
      const int64_t hv = u / vblocks, vb = u % vblocks, hk = hv / group, col = vb * kBV + c;
      const bool col_ok = col < V;
      const int64_t hoff = state_offset(a.h, ch.batch, hslot, hv, HV, KV);
      __syncthreads();  // the previous unit is done with the tiles
      for (int e = tid; e < L * K; e += kThreads) {
        const int i = e / K, x = e % K;
        qs[i * ldk + x] = gdn::load_f(a.q.data, a.q.dtype, gdn::at(a.q, ch.batch, ch.t0 + i, hk) + x);
        ks[i * ldk + x] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, ch.batch, ch.t0 + i, hk) + x);
      }
      for (int r = rg; r < K; r += kRowGroups) hs[r * kBV + c] = col_ok ? gdn::load_f(a.h.data, a.h.dtype, hoff + r * V + col) : 0.f;
      for (int i = rg; i < L; i += kRowGroups) {
        vs[i * kBV + c] =
            col_ok ? gdn::load_f(a.v_new.data, a.v_new.dtype, gdn::at(a.v_new, ch.batch, ch.t0 + i, hv) + col) : 0.f;
      }
      if (tid < L) gs[tid] = a.g.data ? static_cast<const float*>(a.g.data)[gdn::at(a.g, ch.batch, ch.t0 + tid, hv)] : 0.f;
      __syncthreads();
      for (int e = tid; e < L * BT; e += kThreads) {
        const int i = e / BT, j = e % BT;
        float p = 0.f;
        if (j <= i) {  // a select: exp(g_i - g_j) is only evaluated where its argument is <= 0
          for (int x = 0; x < K; ++x) p = fmaf(qs[i * ldk + x], ks[j * ldk + x], p);
          if (a.g.data) p *= expf(gs[i] - gs[j]);
        }
        P[e] = p;
      }
      __syncthreads();
      for (int i = rg; col_ok && i < L; i += kRowGroups) {
        float inter = 0.f;
        for (int r = 0; r < K; ++r) inter = fmaf(qs[i * ldk + r], hs[r * kBV + c], inter);
        if (a.g.data) inter *= expf(gs[i]);
        float intra = 0.f;
        for (int j = 0; j <= i; ++j) intra = fmaf(P[i * BT + j], vs[j * kBV + c], intra);
        gdn::store_f(a.o.data, a.o.dtype, gdn::at(a.o, ch.batch, ch.t0 + i, hv) + col, a.scale * (inter + intra));
      }
    }
  }
}

template <int BT>
void launch_fwd_o(const FwdOArgs& a, int device, cudaStream_t s) {
  const char* op = "chunk_fwd_o";
  const int64_t slots = gdn::chunk_slots(a.geo);
  const int64_t vblocks = (a.V + kBV - 1) / kBV;
  const std::size_t K = static_cast<std::size_t>(a.geo.K);
  const std::size_t smem = (2 * BT * (K + 1) + K * kBV + BT * kBV + BT * BT) * sizeof(float);
  auto kernel = fwd_o_ffma_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(slots), gdn::grid_y(a.geo.HV * vblocks)), dim3(kThreads), smem, s, device, a,
                slots, vblocks, errors);
}

}  // namespace

void chunk_fwd_o_mma(const FwdOArgs& a, int device, cudaStream_t s);     // gdn_fwd_o_mma.cu
bool chunk_fwd_o_wgmma(const FwdOArgs& a, int device, cudaStream_t s);   // gdn_fwd_o_wgmma.cu

void chunk_fwd_o(const FwdOArgs& a, int device, void* stream) {
  const char* op = "chunk_fwd_o";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  const DType dt = a.q.dtype;
  if ((dt == DType::f16 || dt == DType::bf16) && a.k.dtype == dt && a.v_new.dtype == dt && a.h.dtype == dt &&
      (a.geo.BT == 16 || a.geo.BT == 32 || a.geo.BT == 64)) {
    if (!chunk_fwd_o_wgmma(a, device, s)) chunk_fwd_o_mma(a, device, s);
    after_launch(op, s, device);
    return;
  }
  switch (a.geo.BT) {
    case 16: launch_fwd_o<16>(a, device, s); break;
    case 32: launch_fwd_o<32>(a, device, s); break;
    case 64: launch_fwd_o<64>(a, device, s); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
