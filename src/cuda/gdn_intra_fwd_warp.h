// Host side of the warp-per-unit form of the forward's intra-chunk kernel (gdn_intra_fwd_warp.cu), for
// gdn_intra_fwd.cu's dispatch.
#pragma once

#include <cstdint>

#include "cuda/device_error.h"
#include "ops/gdn_forward_impl.h"

namespace fuseops::detail::cuda::gdn {

/// Launch-time constants of the warp kernel.
struct WarpIntraParams {
  int64_t slots;  ///< chunk slots (gdn::chunk_slots)
  int group;      ///< G = HV / H value heads per key head
  int kp, vp;     ///< K and V padded to 16
  DeviceErrorRecord* errors;
};

/// Whether the warp kernel can run: not the intra-first form (a.ready null), chunk 64, an sm_90+ device, k, v, w, u of
/// one 16-bit dtype, K and V <= 128, and 16-byte rows for all four (tensor-map copies), and not
/// FUSEOPS_GDN_INTRA_WARP=0 (set_intra_warp_for_testing overrides the switch; `never`: false). Its bytes are those of
/// the block kernel.
bool intra_fwd_warp_applies(const KktArgs& ka, const WuArgs& a, int device);

/// One launch of the warp kernel where intra_fwd_warp_applies holds, or false (nothing launched: the caller takes the
/// block kernel) where the launch rule keeps the block kernel (at most four (chunk, value head) units per SM, i.e. at
/// most one per warp scheduler, unless the mode is `always`: FUSEOPS_GDN_INTRA_WARP=always or the testing hook), where
/// T or B is past 32 bits (the maps' coordinates), or where k, v, w or u has no tensor map (a broadcast view, or the
/// driver refuses it). Errors name `op`.
bool launch_intra_fwd_warp(const char* op, const KktArgs& ka, const WuArgs& a, int device, void* stream);

}  // namespace fuseops::detail::cuda::gdn
