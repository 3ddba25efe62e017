// wgmma descriptors (common/wgmma_desc.h): a descriptor advanced by wgmma_desc_add equals the one built from the
// advanced address, for every 16-byte-aligned shared address the kernels can use and the offsets they add.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/wgmma_desc.h"

namespace fuseops_test {
namespace {

using fuseops::detail::cuda::wgmma_desc_add;
using fuseops::detail::cuda::wgmma_desc_sw128;
using fuseops::detail::cuda::wgmma_desc_sw128_mn;

// Every multiple of 16 bytes up to 64 KB: k-steps inside a swizzled row (32-byte steps), boxes, buffers and their
// sums (the kernels' largest offset from a descriptor is below 64 KB)
constexpr uint32_t kMaxOffset = 64 * 1024;
constexpr uint32_t kSharedBytes = 256 * 1024;  // the descriptor's 14-bit address field covers 256 KB

TEST(WgmmaDesc, AddEqualsTheDescriptorOfTheAdvancedAddress) {
  int64_t checked = 0;
  for (uint32_t addr = 0; addr < kSharedBytes; addr += 16) {
    for (uint32_t off = 0; off <= kMaxOffset && addr + off < kSharedBytes; off += 16, ++checked) {
      // plain comparisons in the loop (about 10^8 of them), an assertion only on a mismatch
      if (wgmma_desc_add(wgmma_desc_sw128(addr), off) != wgmma_desc_sw128(addr + off) ||
          wgmma_desc_add(wgmma_desc_sw128_mn(addr, 1024), off) != wgmma_desc_sw128_mn(addr + off, 1024)) {
        FAIL() << "address " << addr << " + " << off;
      }
    }
  }
  EXPECT_GT(checked, int64_t{50} * 1000 * 1000);
}

TEST(WgmmaDesc, FieldsOfAKnownDescriptor) {
  // address 0x21000 / 16 in bits 0-13, LBO 16 bytes (1) in bits 16-29, SBO 1024 bytes (64) in bits 32-45, 128-byte
  // swizzle (1) in bits 62-63
  EXPECT_EQ(wgmma_desc_sw128(0x21000), (uint64_t{1} << 62) | (uint64_t{64} << 32) | (uint64_t{1} << 16) | 0x2100u);
  EXPECT_EQ(wgmma_desc_sw128_mn(0x21000, 1024),
            (uint64_t{1} << 62) | (uint64_t{64} << 32) | (uint64_t{64} << 16) | 0x2100u);
}

}  // namespace
}  // namespace fuseops_test
