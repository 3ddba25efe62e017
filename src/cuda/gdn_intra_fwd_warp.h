// Host side of the warp-per-unit form of the forward's intra-chunk kernel (gdn_intra_fwd_warp.cu), for
// gdn_intra_fwd.cu's dispatch.
#pragma once

#include <cstddef>
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
  /// The overlapped form (WuArgs::ready_warp): the flags (ready_flag_base / ready_flag_stride words per value head)
  /// and the sequences walked (N with cu_seqlens, else B); nullptr otherwise
  unsigned* ready;
  int64_t ready_stride, seqs;
};

/// Warps per block of the overlapped form's intra kernel, one block per SM beside fwd_h's overlapped block: its 165 KB
/// of shared memory leave room for three warps' regions (17.9 KB each), and each register file quarter for one warp
/// of 160 registers beside two of fwd_h's.
constexpr int kReadyWarps = 3;

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

/// The overlapped form's launch (WuArgs::ready_warp, a.ready the flags): zeroes the flags, then the kernel as a
/// persistent grid of one block of kReadyWarps warps per SM (or the blocks set_overlap_intra_blocks_for_testing
/// asks for), which walks the units chunk index by chunk index and sets a unit's flag once its w and u rows are
/// stored. False (nothing launched) where a tensor has no map or T or B is past 32 bits. Errors name `op`.
bool launch_intra_fwd_warp_ready(const char* op, const KktArgs& ka, const WuArgs& a, int device, void* stream);

/// What one block of the overlapped form's intra kernel takes of an SM: registers per thread (as compiled), threads,
/// dynamic shared memory in bytes (k's dtype `dt`, f16 or bf16).
struct IntraReadyBlock {
  int regs, threads;
  std::size_t smem;
};
IntraReadyBlock intra_fwd_warp_ready_block(DType dt, int device);

}  // namespace fuseops::detail::cuda::gdn
