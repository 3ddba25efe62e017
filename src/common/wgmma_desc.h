// Shared-memory matrix descriptors of sm_90 warpgroup mma (wgmma) for 128-byte-swizzled operand tiles (the layout
// is described in cuda/wgmma.cuh). Integer arithmetic only: host and device code, so tests check it on the host.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace fuseops::detail::cuda {

/// Descriptor of a K-major, 128-byte-swizzled operand tile starting at shared byte address `addr`.
FUSEOPS_HD uint64_t wgmma_desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
/// The descriptor `bytes` further into the same shared memory (a k-step inside a tile, or the next box): only the
/// start-address field (address / 16, the low 14 bits) changes, and shared addresses stay below 256 KB, so the sum
/// never carries out of it. One add per k-step instead of rebuilding the descriptor from the address.
FUSEOPS_HD uint64_t wgmma_desc_add(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4), hi = static_cast<uint32_t>(desc >> 32);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
/// Descriptor of an MN-major (N contiguous), 128-byte-swizzled B tile (used with TRANS_B): rows of 128 bytes hold 64
/// consecutive n of one k, 16-byte group c of row k stored at group c ^ (k % 8), 8-row groups 1024 bytes apart (the
/// stride byte offset); `lbo` bytes between the 64-column halves when N > 64 (the leading byte offset; for N = 64 it
/// is not used, and passing 1024 as well makes the K stride 1024 whichever of the two fields the hardware reads).
FUSEOPS_HD uint64_t wgmma_desc_sw128_mn(uint32_t addr, uint32_t lbo) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>((lbo & 0x3ffffu) >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

}  // namespace fuseops::detail::cuda
