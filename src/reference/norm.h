// Float64 golden of the gated norm (include/fuseops/norm.h): the textbook two-pass formulas in double, with the
// sensitivities that scale the error an fp32 evaluation is allowed (docs/ops/norm.md, "Tolerances").
#pragma once

#include <cstdint>
#include <vector>

#include "ops/norm_impl.h"
#include "testing/host_tensor.h"

namespace fuseops::reference {

using detail::NormGate;

struct NormGolden {
  /// out [M, N] row-major: value, sensitivity (sum of |partial| * relative perturbation weights, see norm.cpp) and
  /// the magnitude that multiplies a flushed SiLU (testing/compare.h).
  std::vector<double> out, out_sens, out_flush;
  /// mean and rstd [ngroups * M], group-major, with their sensitivities.
  std::vector<double> mean, mean_sens, rstd, rstd_sens;
};

/// x, z (optional, x's shape): [M, N] as rows; weight, bias (optional): [N]. group_size: G (0 means N).
NormGolden layer_norm_fwd(const testing::HostTensor& x, const testing::HostTensor* z, const testing::HostTensor& weight,
                          const testing::HostTensor* bias, double eps, int64_t group_size, NormGate gate, bool rms);

/// fp32 ulps allowed on the sensitivities: blocked sums (32 sequential terms per thread, then a tree of up to 1024
/// threads: 42 ulps on the sums), the square root and division of rstd, and ~9 elementwise roundings.
constexpr double kNormMathUlps = 64;

}  // namespace fuseops::reference
