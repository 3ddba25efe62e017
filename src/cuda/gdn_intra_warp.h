// Host side of the warp-per-unit form of the fused kkt + inverse (gdn_intra_warp.cu), for gdn_intra.cu's dispatch.
#pragma once

#include <cstdint>

#include "cuda/device_error.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cuda::gdn {

/// Launch-time constants of the warp kernel.
struct WarpKktParams {
  int64_t slots;    ///< chunk slots (gdn::chunk_slots)
  int group;        ///< G = HV / H value heads per key head
  int kp;           ///< K padded to 16
  int kboxes;       ///< boxes of 64 columns in a k row tile: (K + 63) / 64
  bool prefetch;    ///< L2 hints for each warp's next unit (set by the launch, by its rule)
  DeviceErrorRecord* errors;
};

/// Whether chunk_gated_delta_rule_fwd_kkt_solve takes the warp kernel: the grid is more than one wave of the block
/// kernels' latency form (`one_wave` false: the warp kernel's one-unit chain is longer than that form's 8-warp one),
/// an sm_90+ device, chunk 64, f16 / bf16 k with 16-byte rows (k_vec), K <= 128, an f16 / bf16 output (the
/// tensor-core inverse) at a 16-byte aligned base, and not FUSEOPS_GDN_KKT_WARP=0; set_kkt_warp_for_testing
/// overrides the grid rule and the switch (`always`: also the L2 hints' rule). Its bytes are those of the block
/// kernels.
bool kkt_solve_warp_applies(const KktArgs& a, const GdnOut& out, int64_t kp, bool k_vec, int device, bool one_wave);

/// One launch of the warp form for k of dtype a.k.dtype and out of dtype out.dtype (kkt_solve_warp_applies holds):
/// the pair-per-unit kernel (two warps per unit) on grids of at most 8 units per SM, else one warp per unit. Its k
/// rows arrive and its output leaves by tensor-map copies: false, and nothing launched, where k or the output has no
/// tensor map (a broadcast view, an empty tensor, T or B past 32 bits, or a map the driver refuses); the caller then
/// takes the block kernels.
bool launch_kkt_solve_warp(const char* op, const KktArgs& a, const GdnOut& out, const WarpKktParams& prm, int device,
                           void* stream);

}  // namespace fuseops::detail::cuda::gdn
