// Comparison of an op's output with the float64 golden, with per-element bounds derived from the math
// (docs/ops/activation.md, "Tolerances"):
//   |out - ref| <= store_eps * |ref| + math_ulps * 2^-24 * sensitivity + flush * flush_scale + atol
// store_eps is the unit roundoff of the output dtype (one rounding at the store), math_ulps bounds the fp32
// arithmetic before it, weighted by the golden's sensitivity |x dref/dx|, flush covers subnormal intermediates (f16 /
// bf16 outputs: flushed by the fast math policy, 2^-117 times the magnitude of the operands that multiply them; f32:
// rounded to the subnormal spacing, 2^-140 times it; common/act_math.h), and atol covers fp32/f16 underflow.
// Non-finite golden values must be non-finite in the output (the same infinity, or NaN where fp32's underflow
// turns tiny * inf into 0 * inf); a NaN golden value must be NaN; a finite golden value must be finite unless it
// rounds beyond the dtype's largest finite value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "testing/host_tensor.h"

namespace fuseops::testing {

struct Tolerance {
  double store_eps = 0;  ///< relative, on |ref|
  double math_ulps = 0;  ///< fp32 ulps (2^-24 relative) on the sensitivity
  double atol = 0;       ///< absolute
  double flush = 0;      ///< on the golden's flush_scale
  double rel_rms = 0;    ///< nominal ||out - ref|| / ||ref|| (store_eps + math_ulps 2^-24), for reports; compare()
                         ///< requires ||out - ref|| <= the RMS of the element bounds instead

  /// The bound for an op whose fp32 math has `math_ulps` ulps of error, stored in `out_dtype`.
  static Tolerance for_dtype(DType out_dtype, double math_ulps);
  /// "2^-8|ref| + 16u*sens", for reports.
  std::string describe() const;
};

/// The largest finite value of a float storage dtype (f32 / f16 / bf16): a golden value beyond it rounds to an
/// infinity of its sign in that dtype.
double max_finite(DType d);

struct Comparison {
  int64_t count = 0;         ///< elements compared
  int64_t violations = 0;    ///< elements outside their bound
  int64_t first_bad = -1;    ///< flat index of the first violation
  double max_abs_error = 0;  ///< over elements where both are finite
  double rel_rms_error = 0;  ///< ||out - ref|| / ||ref|| over elements where both are finite
  bool pass = false;
  std::string detail;        ///< a description of the first violation
};

/// Accumulates a comparison element by element, so large outputs can be compared in parallel chunks
/// (one accumulator per chunk, merged in chunk order).
class ComparisonAccumulator {
 public:
  ComparisonAccumulator(DType out_dtype, const Tolerance& tol, int64_t cols);
  /// Element `index` (flat, row-major [rows, cols]) with output `out`, golden `ref` and sensitivity `sens`.
  void add(int64_t index, double out, double ref, double sens, double flush_scale = 0);
  /// Adds another accumulator's elements (the other's elements must come after this one's).
  void merge(const ComparisonAccumulator& other);
  Comparison finish() const;

 private:
  void violate(int64_t index, double out, double ref, const char* why);
  Tolerance tol_;
  double big_;
  int64_t cols_;
  Comparison c_;
  double err2_ = 0, ref2_ = 0, bound2_ = 0;
};

/// Compares `out` (host, [rows, cols] with its pitch) with the golden values and sensitivities.
/// `flush_scale` may be empty (no flush term).
Comparison compare(const HostTensor& out, const std::vector<double>& ref, const std::vector<double>& sensitivity,
                   const Tolerance& tol, const std::vector<double>& flush_scale = {});

}  // namespace fuseops::testing
