// Division by a divisor fixed at launch, by a precomputed multiplier: for x < 2^31 and 1 <= d < 2^31,
// x / d = (x * m) >> p with p = 31 + ceil(log2 d) and m = ceil(2^p / d) (m < 2^32). The error of m, e = m d - 2^p,
// is below d, so x m / 2^p = x / d + x e / (d 2^p), and x e / (d 2^p) < 2^31 / 2^p <= 1 / d: it never carries the
// quotient past the next integer. Larger x or d take the hardware division. Host and device (CUDA) code.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace fuseops::detail {

struct FastDivmod {
  int64_t d = 1;
  uint32_t m = 1u << 31;
  uint32_t p = 31;

  FastDivmod() = default;
  /// divisor >= 1 (a divisor below 1 leaves the object dividing by itself unchanged: for counts that are never used).
  explicit FastDivmod(int64_t divisor) : d(divisor) {
    if (divisor < 1 || divisor >= (int64_t{1} << 31)) return;  // unused, or the hardware division
    uint32_t log2 = 0;
    while ((int64_t{1} << log2) < divisor) ++log2;
    p = 31 + log2;
    m = static_cast<uint32_t>(((uint64_t{1} << p) + static_cast<uint64_t>(divisor) - 1) / static_cast<uint64_t>(divisor));
  }

  /// q = x / d, r = x - q d for x >= 0.
  FUSEOPS_HD void operator()(int64_t x, int64_t& q, int64_t& r) const {
    if (((x | d) >> 31) == 0) {
      q = static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(x)) * m) >> p);
    } else {
      q = x / d;
    }
    r = x - q * d;
  }
};

}  // namespace fuseops::detail
