// CUDA backend of chunk_gated_delta_rule_fwd_h: the state recurrence across chunks (include/fuseops/gdn_forward.h;
// reference/gdn.md §7).
//
// One 256-thread block per (sequence, value head, block of kBV = 32 state columns), sequential over the sequence's
// chunks; the blocks of one (sequence, head) split V for parallelism. The block's state slice S [K][kBV] stays in
// shared memory in fp32 for the whole sequence. Per chunk:
//   1. h[slot] = S (rounded to h's dtype);
//   2. the chunk's rows of w and k (fp32) and of u (the block's columns) are staged in shared memory;
//   3. v_new = u - w S (stored ungated), then v_new *= exp(g_last - g_i) in place;
//   4. S = exp(g_last) S + k^T v_new.
// Thread (rg = tid / 32, c = tid % 32) owns column c and the rows rg, rg + 8, ... of S and of the chunk. All sums run
// in a fixed order: results do not depend on the batch around a sequence. fp32 FFMA throughout (no TF32).
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
__global__ void __launch_bounds__(kThreads) fwd_h_kernel(const FwdHArgs a, int64_t vblocks, int64_t units,
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
void launch_fwd_h(const FwdHArgs& a, int device, cudaStream_t s) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  const int64_t vblocks = (a.V + kBV - 1) / kBV;
  const int64_t units = a.geo.N * a.geo.HV * vblocks;
  const std::size_t smem =
      (static_cast<std::size_t>(a.geo.K) * kBV + 2 * static_cast<std::size_t>(BT) * a.geo.K + BT * kBV) * sizeof(float);
  auto kernel = fwd_h_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kThreads), smem, s, device, a, vblocks, units, errors);
}

}  // namespace

void chunk_gated_delta_rule_fwd_h(const FwdHArgs& a, int device, void* stream) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (a.geo.BT) {
    case 16: launch_fwd_h<16>(a, device, s); break;
    case 32: launch_fwd_h<32>(a, device, s); break;
    case 64: launch_fwd_h<64>(a, device, s); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
