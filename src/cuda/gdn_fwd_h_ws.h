// The warp-specialised kernel of the GDN forward's fused-output form (gdn_fwd_h_ws.cu), launched by
// chunk_gated_delta_rule_fwd_h_o (gdn_fwd_h.cu) where it applies.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>

#include "ops/gdn_forward_impl.h"

namespace fuseops::detail::cuda {

/// The fused-output recurrence (chunk_gated_delta_rule_fwd_h_o's arithmetic: h and v_new stay in the block, o is
/// written) by the warp-specialised kernel: one warpgroup keeps the state slice S^T [64 columns of V][128] in its
/// accumulators and walks the chunk chain with both products' A operands in registers, a second warpgroup computes o
/// from what the first hands it through shared memory, a producer warp brings the tiles by tensor-map copies. Takes
/// K = 128, BT = 64, V a multiple of 64, 16-bit k, w, u, q, o of one dtype with 16-byte rows, o with pair stores
/// (the caller checks the dtypes and the shape rule); `w`, `k`, `q`: their tensor maps (gdn_rows_map). Returns false
/// (nothing launched) where u has no tensor map. FUSEOPS_GDN_FWD_HO_WS=0 turns it off (the caller then launches the
/// fwd_h_mma kernel's fused-output variant).
bool launch_fwd_h_o_ws(const FwdHArgs& a, const CUtensorMap& w, const CUtensorMap& k, const CUtensorMap& q,
                       int device, cudaStream_t s);

/// Whether the warp-specialised kernel is switched on (environment, tests).
bool fwd_h_o_ws_switched_on();
// (its switches and counters for tests: ops/gdn_forward_impl.h)

}  // namespace fuseops::detail::cuda
