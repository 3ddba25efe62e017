// Float64 golden of the GDN intra-chunk ops (docs/ops/gdn.md): the definitions evaluated in double, written for
// clarity and independent of the backends' algorithms. The cumsum is a plain double sum; every kkt entry is its own
// double dot product and exponential; the inverse is an explicit double forward substitution of each chunk's
// float64 A (never of an op's output).
//
// Besides each value the golden returns a sensitivity (testing/compare.h), the scale of the error an fp32
// evaluation is allowed:
//   cumsum:  |ref| + |scale| * sum_s |g_s|                             (the magnitude of the summed terms)
//   A_ij:    |A_ij| (1 + |g_i| + |g_j|) + 2 |beta_i| e^(g_i - g_j) sum_c |k_ic k_jc|
//            = |ref| + sum over the inputs x of |x * dA_ij/dx|: the dot's terms, the exponent's arguments, beta
//   X = (I + A)^{-1}:  |X_ij| + sum_{m,n} |X_im| S_mn |X_nj|,  S = the sensitivity of A
//            first-order propagation of A's error (|dX| <= |X| |dA| |X|), which also covers the rounding of the
//            substitution itself (backward error <= n u |A| <= n u S, Higham, Accuracy and Stability, Thm 8.5)
// The tolerance constants per op and dtype are derived in docs/ops/gdn.md ("Tolerances") and gdn_tolerance().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuseops/tensor.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"

namespace fuseops::reference {

/// Values and sensitivities of one output, row-major over all its elements.
struct GdnGolden {
  std::vector<double> value;
  std::vector<double> sensitivity;
};

/// One chunk: tokens [row0, row0 + len) of batch row `batch`.
struct GdnChunk {
  int64_t batch = 0, row0 = 0, len = 0;
};

/// The chunks of every sequence, in order. Fixed length (`cu_seqlens` empty): B sequences of T tokens. Varlen:
/// B == 1 and sequence n = tokens [cu[n], cu[n+1]); throws fuseops::Error if `cu_seqlens` is malformed (the golden
/// only describes well-formed inputs).
std::vector<GdnChunk> gdn_chunks(int64_t B, int64_t T, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens);

/// cu_seqlens of sequences of `lengths` tokens: [0, l0, l0 + l1, ...].
std::vector<int64_t> cu_seqlens_of(const std::vector<int64_t>& lengths);

/// log(sigmoid(x)) without overflow: the per-token log-decays that g accumulates.
double log_sigmoid(double x);

/// out[t] = scale * sum of g over t's chunk up to t (reverse: from t to the chunk's end). g: [B, T, HV] (compact,
/// any float dtype); result [B, T, HV].
GdnGolden chunk_local_cumsum(const testing::HostTensor& g, int64_t chunk_size,
                             const std::vector<int64_t>& cu_seqlens = {}, bool reverse = false, double scale = 1.0);

/// Inputs of kkt and the fused op (compact host tensors). g, beta: null when absent.
struct KktInputs {
  const testing::HostTensor* k = nullptr;     ///< [B, T, H, K]
  const testing::HostTensor* g = nullptr;     ///< [B, T, HV], natural-log chunk-local cumsum
  const testing::HostTensor* beta = nullptr;  ///< [B, T, HV]
  int64_t chunk_size = 64;
  std::vector<int64_t> cu_seqlens;            ///< empty: fixed length
  int64_t B() const;
  int64_t T() const;
  int64_t H() const;
  int64_t HV() const;
  int64_t K() const;
};

/// A chunk of one value head as dense L x L row-major matrices: A (strictly lower), X = (I + A)^{-1} (unit lower),
/// and their sensitivities.
struct ChunkGolden {
  int64_t L = 0;
  std::vector<double> A, A_sens, X, X_sens;
};
ChunkGolden kkt_solve_chunk(const KktInputs& in, const GdnChunk& chunk, int64_t hv);

/// A = chunk_scaled_dot_kkt_fwd(k, g, beta): [B, T, HV, BT] (columns at or past the chunk's length are 0).
GdnGolden chunk_scaled_dot_kkt(const KktInputs& in);
/// Ai = (I + A)^{-1} of the float64 A: [B, T, HV, BT].
GdnGolden kkt_solve(const KktInputs& in);
/// (I + A)^{-1} of a given A: [B, T, HV, BT] (compact, any float dtype); reads its strictly lower valid entries.
/// The sensitivity is |X| + |X| |A| |X| (the input A is exact).
GdnGolden solve_tril(const testing::HostTensor& A, const std::vector<int64_t>& cu_seqlens = {});

/// The stages of the GDN intra-chunk ops, for tolerances.
enum class GdnStage { cumsum, kkt, kkt_solve, solve_tril };

/// The element bound of a stage's output in `out_dtype` (testing/compare.h): store_eps = the output's unit
/// roundoff, math_ulps = the fp32 error budget in units of 2^-24 on the sensitivity (docs/ops/gdn.md):
///   cumsum 2*BT + 16; kkt 2*K + 16; kkt_solve 2*K + 2*BT + 16; solve_tril 2*BT + 16.
testing::Tolerance gdn_tolerance(GdnStage stage, DType out_dtype, int64_t K, int64_t chunk_size);

/// The relative RMS criterion of the issue, per output dtype: ||out - ref|| <= limit * ||ref|| + atol * sqrt(n),
/// limit = unit roundoff of the output dtype + 1e-5 (f32 1.0e-5, f16 5.0e-4, bf16 3.9e-3).
double gdn_rel_rms_limit(DType out_dtype);

/// Result of the relative-RMS check over the finite golden elements.
struct RmsCheck {
  bool pass = false;
  double rel_rms_error = 0;  ///< ||out - ref|| / ||ref||
  double limit = 0;
  int64_t nonfinite = 0;     ///< output elements that are NaN or inf (a failure by itself), except the infinities
                             ///< of golden values past the dtype's range (rms_sums: the right answer there)
};
/// `out`: compact host tensor whose row-major elements correspond to `ref`.
RmsCheck gdn_rms_check(const testing::HostTensor& out, const std::vector<double>& ref);

/// Sums of a relative-RMS comparison of `out` (compact host tensor, row-major elements matching `ref`) with `ref`:
/// non-finite outputs are counted and left out, except an infinity of the golden's sign where the golden is past
/// the dtype's largest finite value (2^-20 of slack for the op's own rounding), which is the right answer there and
/// is only left out (testing::compare holds each element to the same rule); of the other elements, those with keep(e)
/// are summed.
struct RmsSums {
  double err2 = 0, ref2 = 0;  ///< sum of (out - ref)^2 and of ref^2
  int64_t n = 0;              ///< elements summed
  int64_t nonfinite = 0;      ///< non-finite outputs (not the expected infinities)
  double max_abs = 0;         ///< largest |out - ref| over the summed elements
  /// ||out - ref|| / ||ref|| (||out - ref|| when ref is all 0).
  double rel_rms_error() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
};
template <typename Keep>
RmsSums rms_sums(const testing::HostTensor& out, const std::vector<double>& ref, Keep keep) {
  RmsSums s;
  const int64_t cols = out.cols();
  const double big = testing::max_finite(out.dtype());
  for (std::size_t e = 0; e < ref.size(); ++e) {
    const int64_t i = static_cast<int64_t>(e);
    const double o = out.get(i / cols, i % cols);
    if (!std::isfinite(o)) {
      const bool overflowed = std::isinf(o) && std::isfinite(ref[e]) && std::signbit(o) == std::signbit(ref[e]) &&
                              std::fabs(ref[e]) * (1 + 0x1p-20) >= big;
      s.nonfinite += !overflowed;
      continue;
    }
    if (!keep(e)) continue;
    s.err2 += (o - ref[e]) * (o - ref[e]);
    s.ref2 += ref[e] * ref[e];
    s.max_abs = std::max(s.max_abs, std::abs(o - ref[e]));
    ++s.n;
  }
  return s;
}

}  // namespace fuseops::reference
