// The packed router keys of 16-bit logits (common/moe_math.h) against the fp32 order they stand for, over every
// f16 and bf16 value: the unsigned order of the packed keys is the order of the sanitised values (ties included)
// and then the lower expert, and a packed key gives back the sanitised value bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/half.h"
#include "common/moe_math.h"

namespace fuseops_test {
namespace {

using fuseops::detail::kMoePackedExpertMask;
using fuseops::detail::moe_order_key;
using fuseops::detail::moe_packed_expert;
using fuseops::detail::moe_packed_key;
using fuseops::detail::moe_packed_value;
using fuseops::detail::moe_sanitize;

void check_all(float (*widen)(uint16_t), const char* dtype) {
  std::vector<float> values;
  for (uint32_t h = 0; h < 65536; ++h) values.push_back(moe_sanitize(widen(static_cast<uint16_t>(h))));
  std::sort(values.begin(), values.end(), [](float a, float b) { return moe_order_key(a) < moe_order_key(b); });
  int mismatches = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    for (int e : {0, 1, 513, 1023}) {
      const uint32_t c = moe_packed_key(x, e);
      mismatches += moe_packed_expert(c) != e;
      mismatches += moe_order_key(moe_packed_value(c)) != moe_order_key(x);
      mismatches += c == 0u;  // 0 stands for experts past E
    }
    if (i == 0) continue;
    const float w = values[i - 1];  // order_key(w) <= order_key(x)
    const bool tie = moe_order_key(w) == moe_order_key(x);
    // Equal values: the lower expert ranks higher; different values: the value decides, whatever the experts.
    if (tie) {
      mismatches += !(moe_packed_key(x, 3) > moe_packed_key(w, 4));
      mismatches += !(moe_packed_key(w, 3) > moe_packed_key(x, 4));
    } else {
      mismatches += !(moe_packed_key(x, 1023) > moe_packed_key(w, 0));
    }
  }
  EXPECT_EQ(0, mismatches) << dtype;
}

TEST(MoePackedKey, OrderAndValueOfEveryBf16) { check_all(fuseops::detail::bf16_to_float, "bf16"); }
TEST(MoePackedKey, OrderAndValueOfEveryF16) { check_all(fuseops::detail::f16_to_float, "f16"); }

/// moe_packed_key_raw on every 16-bit value: the sanitised key for finite values; -inf below every finite value,
/// given back as -inf (its weights equal -FLT_MAX's); NaN and +inf at or above +inf's key, whose value is not finite
/// (the row-maximum check of the threshold router).
void check_raw(float (*widen)(uint16_t), const char* dtype) {
  using fuseops::detail::moe_packed_key_raw;
  const float inf = 1.0f / 0.0f;
  const uint32_t lowest_finite = moe_packed_key(-fuseops::detail::bf16_to_float(0x7f7f), 1023);
  int mismatches = 0, finite = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = widen(static_cast<uint16_t>(h));
    for (int e : {0, 1, 513, 1023}) {
      const uint32_t raw = moe_packed_key_raw(x, e);
      mismatches += moe_packed_expert(raw) != e;
      if (std::isfinite(x)) {
        mismatches += raw != moe_packed_key(moe_sanitize(x), e);
        finite += e == 0;
      } else if (x == -inf) {
        mismatches += !(raw < lowest_finite) || raw == 0u || moe_packed_value(raw) != -inf;
      } else {  // NaN, +inf
        mismatches += raw < moe_packed_key_raw(inf, 1023) || std::isfinite(moe_packed_value(raw));
      }
    }
  }
  EXPECT_EQ(0, mismatches) << dtype;
  EXPECT_GT(finite, 60000) << dtype;
  EXPECT_EQ(moe_packed_key_raw(-0.0f, 7), moe_packed_key(0.0f, 7));
}

TEST(MoePackedKey, RawKeyOfEveryBf16) { check_raw(fuseops::detail::bf16_to_float, "bf16"); }
TEST(MoePackedKey, RawKeyOfEveryF16) { check_raw(fuseops::detail::f16_to_float, "f16"); }

TEST(MoePackedKey, SpecialValues) {
  // +inf and the largest finite bf16 differ; NaN and -inf tie (both -FLT_MAX), below the lowest finite bf16.
  const float inf = 1.0f / 0.0f, big = fuseops::detail::bf16_to_float(0x7f7f);
  EXPECT_GT(moe_packed_key(moe_sanitize(inf), 5), moe_packed_key(moe_sanitize(big), 0));
  EXPECT_GT(moe_packed_key(moe_sanitize(-big), 5), moe_packed_key(moe_sanitize(-inf), 0));
  const float nan = fuseops::detail::bf16_to_float(0x7fc0);
  EXPECT_GT(moe_packed_key(moe_sanitize(nan), 2), moe_packed_key(moe_sanitize(-inf), 3));
  EXPECT_GT(moe_packed_key(moe_sanitize(-inf), 2), moe_packed_key(moe_sanitize(nan), 3));
  EXPECT_EQ(moe_packed_key(moe_sanitize(-0.0f), 7), moe_packed_key(0.0f, 7));
  EXPECT_EQ(kMoePackedExpertMask + 1, 1024u);  // every expert up to kMaxRouterExperts
}

}  // namespace
}  // namespace fuseops_test

namespace fuseops_test {
namespace {

template <int N>
void check_sort(std::mt19937& rng) {
  for (int rep = 0; rep < 200; ++rep) {
    uint32_t a[N];
    std::vector<uint32_t> want(N);
    for (int i = 0; i < N; ++i) want[i] = a[i] = rep % 3 == 0 ? rng() % 4 : rng();  // many ties in some
    std::sort(want.begin(), want.end(), [](uint32_t x, uint32_t y) { return x > y; });
    fuseops::detail::moe_sort_desc<N>(a);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), a)) << "N " << N << " rep " << rep;
  }
}

TEST(MoePackedKey, SortDescending) {
  std::mt19937 rng(7);
  check_sort<1>(rng);
  check_sort<2>(rng);
  check_sort<4>(rng);
  check_sort<8>(rng);
  check_sort<16>(rng);
  check_sort<32>(rng);
}

}  // namespace
}  // namespace fuseops_test
