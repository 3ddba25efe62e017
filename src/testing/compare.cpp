#include "testing/compare.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <limits>

namespace fuseops::testing {
namespace {
double unit_roundoff(DType d) {
  switch (d) {
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

double max_finite(DType d) {
  switch (d) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    default: return std::numeric_limits<float>::max();
  }
}

Tolerance Tolerance::for_dtype(DType out_dtype, double math_ulps) {
  Tolerance t;
  t.store_eps = unit_roundoff(out_dtype);
  t.math_ulps = math_ulps;
  // Absolute floor: fp32 intermediates lose precision in the subnormal range (below 2^-126 ~ 1.2e-38) and
  // products of them with inputs up to ~1e8 land near 1e-30; differences below 1e-30 are not significant for any
  // op here. f16 stores round subnormals to a spacing of 2^-24.
  t.atol = 1e-30 + (out_dtype == DType::f16 ? std::ldexp(1.0, -25) : 0.0);
  t.rel_rms = t.store_eps + math_ulps * std::ldexp(1.0, -24);
  // The fast math policy (f16 / bf16 outputs) flushes subnormal intermediates (see common/act_math.h): up to 2^-126
  // each, times at most ~272 besides the flush scale (2 |x| du/dx of the tanh-GELU derivative): 2^-126 * 512. f32
  // outputs keep subnormal intermediates, each rounded to the spacing 2^-149 (half of it per rounding, two
  // roundings, the same factor): 2^-140.
  t.flush = out_dtype == DType::f32 ? std::ldexp(1.0, -140) : std::ldexp(1.0, -117);
  return t;
}

std::string Tolerance::describe() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "2^%d|ref|+%gu32*sens, rms %.1e", static_cast<int>(std::lround(std::log2(store_eps))),
                math_ulps, rel_rms);
  return buf;
}

ComparisonAccumulator::ComparisonAccumulator(DType out_dtype, const Tolerance& tol, int64_t cols)
    : tol_(tol), big_(max_finite(out_dtype)), cols_(cols > 0 ? cols : 1) {}

void ComparisonAccumulator::violate(int64_t i, double o, double r, const char* why) {
  if (c_.violations++ == 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "element %lld (row %lld, col %lld): got %.9g, expected %.9g (%s)",
                  static_cast<long long>(i), static_cast<long long>(i / cols_), static_cast<long long>(i % cols_), o,
                  r, why);
    c_.detail = buf;
    c_.first_bad = i;
  }
}

void ComparisonAccumulator::add(int64_t i, double o, double r, double sens, double flush_scale) {
  ++c_.count;
  if (std::isnan(r)) {
    if (!std::isnan(o)) violate(i, o, r, "expected NaN");
    return;
  }
  if (std::isinf(r)) {
    if (!(std::isnan(o) || o == r)) violate(i, o, r, "expected a non-finite value");
    return;
  }
  const double bound = tol_.store_eps * std::fabs(r) + tol_.math_ulps * std::ldexp(1.0, -24) * sens +
                       tol_.flush * flush_scale + tol_.atol;
  if (std::isinf(o)) {
    // Finite golden values may round past the dtype's largest finite value.
    if (!(std::fabs(r) + bound >= big_ && std::signbit(o) == std::signbit(r))) violate(i, o, r, "unexpected inf");
    return;
  }
  if (std::isnan(o)) {
    violate(i, o, r, "unexpected NaN");
    return;
  }
  const double e = std::fabs(o - r);
  c_.max_abs_error = std::max(c_.max_abs_error, e);
  err2_ += e * e;
  ref2_ += r * r;
  bound2_ += bound * bound;
  if (e > bound) violate(i, o, r, "outside the bound");
}

void ComparisonAccumulator::merge(const ComparisonAccumulator& o) {
  if (c_.violations == 0 && o.c_.violations > 0) {
    c_.detail = o.c_.detail;
    c_.first_bad = o.c_.first_bad;
  }
  c_.violations += o.c_.violations;
  c_.count += o.c_.count;
  c_.max_abs_error = std::max(c_.max_abs_error, o.c_.max_abs_error);
  err2_ += o.err2_;
  ref2_ += o.ref2_;
  bound2_ += o.bound2_;
}

Comparison ComparisonAccumulator::finish() const {
  Comparison c = c_;
  c.rel_rms_error = ref2_ > 0 ? std::sqrt(err2_ / ref2_) : std::sqrt(err2_);
  // The RMS criterion is the RMS form of the element bounds, ||out - ref|| <= ||bound||. The fixed
  // ||out - ref|| <= rel_rms * ||ref|| rejected correct results wherever the element bounds are wider than
  // rel_rms * |ref| (sensitivity > |ref|, atol): e.g. one f16 element that underflows to 0 as allowed by atol
  // has relative RMS error 1. rel_rms_error is still reported.
  c.pass = c.violations == 0 && err2_ <= bound2_;
  if (c.violations == 0 && !c.pass) {
    char buf[120];
    std::snprintf(buf, sizeof buf, "RMS error %.3g above the RMS of the element bounds %.3g", std::sqrt(err2_),
                  std::sqrt(bound2_));
    c.detail = buf;
  }
  return c;
}

Comparison compare(const HostTensor& out, const std::vector<double>& ref, const std::vector<double>& sensitivity,
                   const Tolerance& tol, const std::vector<double>& flush_scale) {
  const int64_t cols = out.cols();
  ComparisonAccumulator acc(out.dtype(), tol, cols);
  const int64_t n = static_cast<int64_t>(ref.size());
  for (int64_t i = 0; i < n; ++i) {
    acc.add(i, out.get(cols ? i / cols : 0, cols ? i % cols : 0), ref[i], sensitivity[i],
            flush_scale.empty() ? 0.0 : flush_scale[i]);
  }
  return acc.finish();
}

}  // namespace fuseops::testing
