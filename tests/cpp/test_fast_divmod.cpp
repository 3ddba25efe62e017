// FastDivmod (common/fast_divmod.h): the multiplier division against the hardware one, at the edges of its range.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/fast_divmod.h"

namespace fuseops_test {
namespace {

using fuseops::detail::FastDivmod;

void expect_exact(int64_t d, int64_t x) {
  const FastDivmod f(d);
  int64_t q = -1, r = -1;
  f(x, q, r);
  ASSERT_EQ(q, x / d) << "x " << x << " d " << d;
  ASSERT_EQ(r, x % d) << "x " << x << " d " << d;
}

TEST(FastDivmod, MatchesDivisionAtTheEdges) {
  const int64_t top = (int64_t{1} << 31) - 1;
  std::vector<int64_t> divisors = {1, 2, 3, 5, 7, 8, 9, 31, 32, 33, 64, 100, 255, 256, 257, 1000, 65535, 65536, 65537,
                                   (int64_t{1} << 30) - 1, int64_t{1} << 30, (int64_t{1} << 30) + 1, top - 1, top,
                                   int64_t{1} << 31, int64_t{3} << 40};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(top)));
  for (int64_t d : divisors) {
    // around 0, around multiples of d, at the top of the fast range and past it (the hardware division)
    std::vector<int64_t> xs = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top - 1, top, top + 1, int64_t{1} << 40};
    for (int64_t k : {top / d, top / d - 1, int64_t{12345} % (top / d + 1)}) {
      for (int64_t dx : {-1, 0, 1}) xs.push_back(k * d + dx);
    }
    for (int j = 0; j < 50; ++j) xs.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(top + 1)));
    for (int64_t x : xs) {
      if (x >= 0) expect_exact(d, x);
    }
  }
}

TEST(FastDivmod, SmallDivisorsExhaustiveSmallDividends) {
  for (int64_t d = 1; d <= 300; ++d) {
    for (int64_t x = 0; x < 5000; ++x) expect_exact(d, x);
  }
}

}  // namespace
}  // namespace fuseops_test
