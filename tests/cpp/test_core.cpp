// Core types: TensorView, dtypes, devices, version, and the host float <-> f16 / bf16 conversions (bit-exact
// round to nearest even, checked exhaustively against a slow reference).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <regex>
#include <string>
#include <vector>

#include "common/half.h"
#include "core/env.h"
#include "test_util.h"
#include "testing/parallel.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::Error;
using fuseops::ErrorKind;
namespace fd = fuseops::detail;

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "did not throw (expected \"" << needle << "\")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TensorView, ContiguousShapeAndStrides) {
  float data[24];
  TensorView v(data, DType::f32, Device::cpu(), {2, 3, 4});
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.stride(-3), 12);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.shape_str(), "[2, 3, 4]");
  expect_invalid([&] { (void)v.size(3); }, "out of range");
  expect_invalid([&] { (void)v.stride(-4); }, "out of range");

  TensorView scalar(data, DType::f32, Device::cpu(), {});
  EXPECT_EQ(scalar.rank, 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_TRUE(scalar.is_contiguous());
  EXPECT_EQ(scalar.shape_str(), "[]");

  TensorView empty(nullptr, DType::bf16, Device::cpu(), {0, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.strides[0], 5);
}

TEST(TensorView, Contiguity) {
  float data[64];
  EXPECT_FALSE(TensorView(data, DType::f32, Device::cpu(), {2, 3}, {4, 1}).is_contiguous());
  EXPECT_FALSE(TensorView(data, DType::f32, Device::cpu(), {3, 2}, {1, 3}).is_contiguous());
  EXPECT_TRUE(TensorView(data, DType::f32, Device::cpu(), {1, 3}, {100, 1}).is_contiguous());  // size-1 dim
  EXPECT_TRUE(TensorView(data, DType::f32, Device::cpu(), {2, 1, 3}, {3, 7, 1}).is_contiguous());
  EXPECT_TRUE(TensorView(data, DType::f32, Device::cpu(), {4}, {1}).is_contiguous());
  EXPECT_FALSE(TensorView(data, DType::f32, Device::cpu(), {4}, {2}).is_contiguous());
  // No elements: contiguous whatever the strides (the constructor's and PyTorch's differ for a 0-sized dim).
  EXPECT_TRUE(TensorView(data, DType::f32, Device::cpu(), {2, 0, 4, 8}).is_contiguous());
  EXPECT_TRUE(TensorView(data, DType::f32, Device::cpu(), {2, 0, 4, 8}, {32, 32, 8, 1}).is_contiguous());
  // More than 2^63 - 1 elements, without signed overflow (the sanitizer build runs this): the row-major strides of
  // [2^31, 2^31, 1, 256] all fit (only the element count does not); those of [2, 2^40, 2^40] do not (the
  // constructor saturates the outer one), nor can a stride follow 4 x 2^61 elements
  const int64_t big = int64_t{1} << 31;
  const TensorView huge(data, DType::f32, Device::cpu(), {big, big, 1, 256});
  EXPECT_TRUE(huge.is_contiguous());
  EXPECT_EQ(huge.numel(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(TensorView(data, DType::f32, Device::cpu(), {2, int64_t{1} << 40, int64_t{1} << 40}).is_contiguous());
  EXPECT_FALSE(
      TensorView(data, DType::f32, Device::cpu(), {3, big * big / 2, 4}, {int64_t{1} << 62, 4, 1}).is_contiguous());
}

TEST(TensorView, Slice) {
  uint16_t data[4 * 6];
  TensorView v(data, DType::f16, Device::cpu(), {4, 6});
  TensorView rows = v.slice(0, 1, 2);
  EXPECT_EQ(rows.data, static_cast<void*>(data + 6));
  EXPECT_EQ(rows.shape_str(), "[2, 6]");
  EXPECT_TRUE(rows.is_contiguous());
  TensorView cols = v.slice(-1, 2, 3);
  EXPECT_EQ(cols.data, static_cast<void*>(data + 2));
  EXPECT_EQ(cols.shape_str(), "[4, 3]");
  EXPECT_EQ(cols.strides[0], 6);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(v.slice(1, 6, 0).numel(), 0);  // empty slice at the end
  expect_invalid([&] { (void)v.slice(0, 3, 2); }, "outside dim 0");
  expect_invalid([&] { (void)v.slice(1, -1, 2); }, "slice");
  expect_invalid([&] { (void)v.slice(2, 0, 1); }, "out of range");
  // ranges whose end passes INT64_MAX (start + length wrapped negative and was accepted, the view pointing before
  // the data), and offsets past 64 bits (a saturated stride) are errors
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  expect_invalid([&] { (void)v.slice(1, kMax - 1, 2); }, "range of 2 elements from 9223372036854775806 outside dim 1");
  expect_invalid([&] { (void)v.slice(1, kMax, kMax); }, "outside dim 1");
  expect_invalid([&] { (void)v.slice(1, 1, kMax); }, "outside dim 1 of size 6");
  const TensorView wide(data, DType::f32, Device::cpu(), {3, int64_t{1} << 62, 4});
  expect_invalid([&] { (void)wide.slice(0, 1, 1); }, "the byte offset of element 1 of dim 0");
  EXPECT_EQ(wide.slice(0, 0, 1).data, static_cast<void*>(data));
  // a slice of a null view stays null (it pointed at 0x18, which the ops took for data), so ops still refuse it
  const TensorView none(nullptr, DType::f32, Device::cpu(), {4, 6});
  const TensorView none_rows = none.slice(0, 1, 2);
  EXPECT_EQ(none_rows.data, nullptr);
  float out[6];
  expect_invalid([&] { fuseops::silu_and_mul(TensorView(out, DType::f32, Device::cpu(), {2, 3}), none_rows); },
                 "input: expected a data pointer for 12 elements, got null");
  // a default TensorView (rank 0, one element, no data) is told apart from a view whose data is missing
  expect_invalid([&] { fuseops::silu_and_mul(TensorView(out, DType::f32, Device::cpu(), {2, 3}), TensorView()); },
                 "input: expected a data pointer for 1 element, got null (a rank-0 view: a default TensorView()");
  // a dtype field set outside the enum is printed by its code wherever a dtype is checked
  TensorView junk(data, DType::f32, Device::cpu(), {2, 6});
  junk.dtype = static_cast<DType>(7);
  expect_invalid([&] { fuseops::silu_and_mul(TensorView(out, DType::f32, Device::cpu(), {2, 3}), junk); },
                 "input: expected dtype f32 | f16 | bf16, got dtype code 7");
}

TEST(TensorView, RankSetByHandPastTheArrays) {
  // the rank is a public field: set past kMaxRank, the accessors throw (size(8) read strides[0], stride(8) the stack)
  float data[6];
  TensorView v(data, DType::f32, Device::cpu(), {2, 3});
  for (int32_t rank : {9, 100, -1}) {
    v.rank = rank;
    expect_invalid([&] { (void)v.size(0); }, "TensorView::size: expected rank in [0, 8], got " + std::to_string(rank));
    expect_invalid([&] { (void)v.stride(0); }, "TensorView::stride: expected rank in [0, 8]");
    expect_invalid([&] { (void)v.numel(); }, "TensorView::numel: expected rank in [0, 8]");
    expect_invalid([&] { (void)v.is_contiguous(); }, "TensorView::is_contiguous: expected rank in [0, 8]");
    expect_invalid([&] { (void)v.slice(0, 0, 1); }, "TensorView::slice: expected rank in [0, 8]");
  }
  v.rank = 2;
  EXPECT_EQ(v.size(1), 3);
}

TEST(TensorView, FromArraysAndRankLimits) {
  const int64_t shape[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int64_t strides[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
  TensorView v = TensorView::from_arrays(nullptr, DType::i64, Device::cuda(1), 8, shape, nullptr);
  EXPECT_EQ(v.rank, 8);
  EXPECT_EQ(v.numel(), 40320);
  EXPECT_EQ(v.strides[7], 1);
  EXPECT_EQ(v.strides[0], 40320);
  EXPECT_EQ(v.device, Device::cuda(1));
  TensorView w = TensorView::from_arrays(nullptr, DType::f32, Device::cpu(), 2, shape + 7, strides + 7);
  EXPECT_EQ(w.shape_str(), "[8, 9]");
  EXPECT_EQ(w.strides[0], 0);
  expect_invalid([&] { TensorView::from_arrays(nullptr, DType::f32, Device::cpu(), 9, shape, strides); }, "rank in [0, 8]");
  expect_invalid([&] { TensorView::from_arrays(nullptr, DType::f32, Device::cpu(), -1, shape, strides); }, "got -1");
  expect_invalid([&] { TensorView::from_arrays(nullptr, DType::f32, Device::cpu(), 2, nullptr, nullptr); }, "shape");
  expect_invalid([&] { TensorView(nullptr, DType::f32, Device::cpu(), {1, 2, 3, 4, 5, 6, 7, 8, 9}); }, "rank in [0, 8]");
  expect_invalid([&] { TensorView(nullptr, DType::f32, Device::cpu(), {2, -3}); }, "non-negative");
  const int64_t neg[2] = {4, -1};
  expect_invalid([&] { TensorView::from_arrays(nullptr, DType::f32, Device::cpu(), 2, neg, nullptr); }, "non-negative");
  expect_invalid([&] { TensorView(nullptr, DType::f32, Device::cpu(), {2, 3}, {3}); }, "as many strides");
}

TEST(DTypes, SizesNamesAndDevices) {
  EXPECT_EQ(fuseops::dtype_size(DType::f32), 4u);
  EXPECT_EQ(fuseops::dtype_size(DType::f16), 2u);
  EXPECT_EQ(fuseops::dtype_size(DType::bf16), 2u);
  EXPECT_EQ(fuseops::dtype_size(DType::i32), 4u);
  EXPECT_EQ(fuseops::dtype_size(DType::i64), 8u);
  EXPECT_STREQ(fuseops::dtype_name(DType::f32), "f32");
  EXPECT_STREQ(fuseops::dtype_name(DType::f16), "f16");
  EXPECT_STREQ(fuseops::dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(fuseops::dtype_name(DType::i32), "i32");
  EXPECT_STREQ(fuseops::dtype_name(DType::i64), "i64");
  EXPECT_TRUE(fuseops::is_floating(DType::bf16));
  EXPECT_FALSE(fuseops::is_floating(DType::i32));
  expect_invalid([] { (void)fuseops::dtype_size(static_cast<DType>(42)); }, "42");
  EXPECT_EQ(fuseops::device_name(Device::cpu()), "cpu");
  EXPECT_EQ(fuseops::device_name(Device::cuda(3)), "cuda:3");
  Device odd = Device::cpu();
  odd.kind = static_cast<Device::Kind>(7);  // set by hand outside the enum: not shown as the CPU
  EXPECT_EQ(fuseops::device_name(odd), "device kind code 7");
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
  EXPECT_TRUE(Device::cuda().is_cuda());
}

TEST(Version, IsSemanticAndConsistent) {
  ASSERT_NE(fuseops::version(), nullptr);
  EXPECT_TRUE(std::regex_match(fuseops::version(), std::regex("[0-9]+\\.[0-9]+\\.[0-9]+"))) << fuseops::version();
  if (!fuseops::built_with_cuda()) {
    EXPECT_EQ(fuseops::cuda_device_count(), 0);
  }
  EXPECT_GE(fuseops::cuda_device_count(), 0);
}

// Seeds (--seed, FUSEOPS_SEED) are decimal only: strtoull's base prefixes read "010" as 8 and "0x10" as 16, so the
// replay line showed another number than the one typed. FUSEOPS_SEED set but empty counts as unset.
TEST(Seeds, DecimalOnly) {
  using fuseops::testing::parse_seed;
  EXPECT_EQ(parse_seed("--seed", "0"), 0u);
  EXPECT_EQ(parse_seed("--seed", "010"), 10u);
  EXPECT_EQ(parse_seed("--seed", "18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"0x10", "0X10", "1e3", "-1", "+1", " 1", "1 ", "", "18446744073709551616", "0b1", "1_0"}) {
    expect_invalid([&] { parse_seed("--seed", bad); }, "--seed: expected a decimal integer seed");
  }
  const char* old = std::getenv("FUSEOPS_SEED");
  const std::string saved = old ? old : "";
  setenv("FUSEOPS_SEED", "010", 1);
  EXPECT_EQ(fuseops::testing::seed_from_env_or_clock(), 10u);
  setenv("FUSEOPS_SEED", "0x10", 1);
  expect_invalid([] { fuseops::testing::seed_from_env_or_clock(); }, "FUSEOPS_SEED: expected a decimal integer");
  setenv("FUSEOPS_SEED", "", 1);
  EXPECT_NO_THROW(fuseops::testing::seed_from_env_or_clock());
  if (old) {
    setenv("FUSEOPS_SEED", saved.c_str(), 1);
  } else {
    unsetenv("FUSEOPS_SEED");
  }
}

// The measurement knobs that take a count (FUSEOPS_MOE_ALIGN_SMALL_BLOCKS, ...) read decimal digits only: "64abc"
// was read as 64, and values past the knob's range were clamped.
TEST(Environment, CountsAreDecimalDigitsOnly) {
  const char* name = "FUSEOPS_TEST_ENV_COUNT";
  unsetenv(name);
  EXPECT_EQ(fd::env_count(name, 64), -1);
  setenv(name, "", 1);
  EXPECT_EQ(fd::env_count(name, 64), -1);
  setenv(name, "064", 1);
  EXPECT_EQ(fd::env_count(name, 64), 64);
  setenv(name, "0", 1);
  EXPECT_EQ(fd::env_count(name, 64), 0);
  setenv(name, "9223372036854775807", 1);
  EXPECT_EQ(fd::env_count(name, INT64_MAX), INT64_MAX);
  for (const char* bad : {"65", "64abc", "0x10", "-1", "+1", " 1", "1 ", "1e3", "18446744073709551616"}) {
    setenv(name, bad, 1);
    expect_invalid([&] { fd::env_count(name, 64); },
                   std::string(name) + ": expected a decimal count from 0 to 64, got \"" + bad + "\"");
  }
  setenv(name, "9223372036854775808", 1);
  expect_invalid([&] { fd::env_count(name, INT64_MAX); }, "from 0 to 9223372036854775807");
  unsetenv(name);
  uint64_t v = 7;
  EXPECT_TRUE(fd::parse_decimal("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_FALSE(fd::parse_decimal("18446744073709551616", &v));
  EXPECT_FALSE(fd::parse_decimal("", &v));
  EXPECT_EQ(v, UINT64_MAX);  // untouched by a failed read
}

// ---------------------------------------------------------------------------------------------------------------
// f16 / bf16. Slow reference: the nearest of the two representable neighbours, ties to the even pattern, with the
// infinity pattern standing for 2^(emax+1) (IEEE overflow rule).

double f16_value(uint16_t h) { return h == 0x7c00 ? 65536.0 : fd::f16_to_float(h); }
double bf16_value(uint16_t h) { return h == 0x7f80 ? std::ldexp(1.0, 128) : fd::bf16_to_float(h); }

uint16_t slow_round(float f, uint16_t inf_bits, double (*value)(uint16_t)) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return sign | inf_bits;
  uint16_t lo = 0, hi = inf_bits;  // largest pattern with value <= a, by bisection over the monotonic patterns
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    (value(mid) <= a ? lo : hi) = mid;
  }
  if (value(hi) <= a) lo = hi;
  if (lo == inf_bits) return sign | inf_bits;
  const double dlo = a - value(lo), dhi = value(lo + 1) - a;
  const uint16_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | r;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

// The host loop of the goldens: every chunk once, with its fixed bounds; an exception thrown in a worker thread (a
// golden's std::bad_alloc) comes back to the caller once the threads have stopped, instead of std::terminate.
TEST(ParallelChunks, EveryChunkOnceAndExceptionsReachTheCaller) {
  std::vector<int> seen(1000, 0);
  fuseops::testing::parallel_chunks(1000, 7, [&](int64_t k, int64_t b, int64_t e) {
    EXPECT_EQ(b, k * 7);
    EXPECT_EQ(e, std::min<int64_t>(1000, b + 7));
    for (int64_t i = b; i < e; ++i) seen[static_cast<std::size_t>(i)] += 1;
  });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 1000);
  auto throwing = [] {
    fuseops::testing::parallel_chunks(1000, 7, [](int64_t k, int64_t, int64_t) {
      if (k == 100) throw std::bad_alloc();
    });
  };
  EXPECT_THROW(throwing(), std::bad_alloc);
}

TEST(Half, KnownF16Patterns) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct { float f; uint16_t h; } cases[] = {
      {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.0f, 0x0000}, {-0.0f, 0x8000}, {0.1f, 0x2e66},
      {65504.0f, 0x7bff}, {65519.996f, 0x7bff}, {65520.0f, 0x7c00}, {-65520.0f, 0xfc00}, {1e10f, 0x7c00},
      {inf, 0x7c00}, {-inf, 0xfc00},
      {std::ldexp(1.0f, -14), 0x0400},                   // smallest normal
      {std::ldexp(1023.0f, -24), 0x03ff},                // largest subnormal
      {std::ldexp(1.0f, -24), 0x0001},                   // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},                   // tie between 0 and 2^-24: even (0)
      {std::ldexp(1.0f, -25) * 1.0000001f, 0x0001},      // just above the tie
      {std::ldexp(3.0f, -25), 0x0002},                   // tie between 1 and 2 (x 2^-24): even (2)
      {std::ldexp(1.0f, -26), 0x0000},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},            // tie: even
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},            // tie: even (up)
      {std::ldexp(2047.0f, -25), 0x0400},                // rounds up from subnormal to the smallest normal
  };
  // the pattern's value from its fields, apart from the decoder under test (the check had re-asserted its own guard)
  const auto decode = [](uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float special = m != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    const float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
                    : e == 31 ? special
                              : std::ldexp(static_cast<float>(1024 + m), e - 25);
    return (h & 0x8000) != 0 ? -v : v;
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fd::float_to_f16(c.f), c.h) << c.f;
    EXPECT_EQ(fd::f16_to_float(c.h), decode(c.h)) << c.h;
  }
  EXPECT_EQ(fd::f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fd::f16_to_float(0xfbff), -65504.0f);
  EXPECT_EQ(fd::f16_to_float(0x7c00), inf);
  EXPECT_TRUE(std::isnan(fd::f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(fd::f16_to_float(0xfc01)));
  EXPECT_TRUE(f16_is_nan(fd::float_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(f16_is_nan(fd::float_to_f16(fd::bits_float(0x7f800001u))));  // signalling NaN stays NaN, not inf
}

TEST(Half, KnownBf16Patterns) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fd::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fd::float_to_bf16(3.0f), 0x4040);
  EXPECT_EQ(fd::float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fd::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);     // tie: even
  EXPECT_EQ(fd::float_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);     // tie: even (up)
  EXPECT_EQ(fd::float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // past the largest bf16 + half ulp
  EXPECT_EQ(fd::float_to_bf16(fd::bits_float(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(fd::float_to_bf16(-inf), 0xff80);
  EXPECT_EQ(fd::float_to_bf16(fd::bits_float(0x00018000u)), 0x0002);  // subnormal tie: even
  EXPECT_EQ(fd::bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(fd::bf16_to_float(0x7f80), inf);
  EXPECT_TRUE(bf16_is_nan(fd::float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(bf16_is_nan(fd::float_to_bf16(fd::bits_float(0x7f800001u))));  // not truncated to inf
  EXPECT_TRUE(bf16_is_nan(fd::float_to_bf16(fd::bits_float(0xffffffffu))));
}

TEST(Half, ExhaustiveRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto b = static_cast<uint16_t>(h);
    if (f16_is_nan(b)) {
      EXPECT_TRUE(f16_is_nan(fd::float_to_f16(fd::f16_to_float(b)))) << std::hex << h;
    } else {
      ASSERT_EQ(fd::float_to_f16(fd::f16_to_float(b)), b) << std::hex << h;
    }
    if (bf16_is_nan(b)) {
      EXPECT_TRUE(bf16_is_nan(fd::float_to_bf16(fd::bf16_to_float(b)))) << std::hex << h;
    } else {
      ASSERT_EQ(fd::float_to_bf16(fd::bf16_to_float(b)), b) << std::hex << h;
    }
  }
}

// Every midpoint between neighbouring patterns (the ties), and the floats just below and above it.
TEST(Half, ExhaustiveTiesMatchSlowReference) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float mid = static_cast<float>((f16_value(h) + f16_value(h + 1)) / 2);  // exact: 12 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      ASSERT_EQ(fd::float_to_f16(f), slow_round(f, 0x7c00, f16_value)) << f;
      ASSERT_EQ(fd::float_to_f16(-f), slow_round(-f, 0x7c00, f16_value)) << -f;
    }
  }
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    const float mid = fd::bits_float((h << 16) | 0x8000u);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f)}) {
      ASSERT_EQ(fd::float_to_bf16(f), slow_round(f, 0x7f80, bf16_value)) << f;
      ASSERT_EQ(fd::float_to_bf16(-f), slow_round(-f, 0x7f80, bf16_value)) << -f;
    }
  }
}

TEST(Half, RandomFloatsMatchSlowReference) {
  std::mt19937_64 rng = test_rng();
  for (int i = 0; i < 200000; ++i) {
    const float f = fd::bits_float(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fd::float_to_f16(f), slow_round(f, 0x7c00, f16_value)) << std::hexfloat << f;
    ASSERT_EQ(fd::float_to_bf16(f), slow_round(f, 0x7f80, bf16_value)) << std::hexfloat << f;
  }
}

}  // namespace
}  // namespace fuseops_test
