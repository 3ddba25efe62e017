// Helpers of the GDN intra-chunk tests: realistic and adversarial inputs, tensors placed between guard elements
// (on the host, mirrored on the device for CUDA), a run of every op of fuseops/gdn.h on one input set, and the
// comparisons with the float64 golden (src/reference/gdn.h).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/gdn_impl.h"
#include "reference/gdn.h"
#include "test_util.h"

namespace fuseops_test {
inline void PrintTo(Where where, std::ostream* os) { *os << where_name(where); }
}  // namespace fuseops_test

namespace fuseops_test::gdn {

/// The per-token log-decays that g (their chunk-local cumsum) is made of.
enum class Decay {
  realistic,  ///< log-sigmoid of N(mu_h, 1), mu_h in {-2, 0, 2} by head: about -0.1 .. -3 per token
  none,       ///< g absent
  zero,       ///< all 0 (g present)
  strong,     ///< -100 .. -200 per token
  extreme,    ///< -1e2 .. -1e30 per token (log-uniform)
  mixed,      ///< per token one of 0, -1e-3, log-sigmoid, -30, -100, -1e4
};
const char* decay_name(Decay d);
/// One per-token log-decay of the distribution (value head hv).
double draw_decay(Decay d, int64_t hv, std::mt19937_64& rng);
using fuseops::reference::log_sigmoid;

/// Keys: L2-normalised per token (realistic), or with norms 10^U(-3, 1.5) (the inverse may overflow: kkt only).
enum class Keys { normalized, wide };

/// One configuration of the intra-chunk ops.
struct Spec {
  int64_t B = 1, T = 0, H = 1, HV = 1, K = 64, BT = 64;
  std::vector<int64_t> seqlens;  ///< varlen when non-empty (then B = 1 and T = the sum)
  DType cu_dtype = DType::i64;
  DType k_dtype = DType::bf16, beta_dtype = DType::bf16, out_dtype = DType::f32;
  bool has_beta = true;
  Decay decay = Decay::realistic;
  Keys keys = Keys::normalized;
  bool strided = false;  ///< k rows, g and beta tokens padded (non-contiguous inputs)
  /// Every tensor starts 16-byte aligned (guards of 8 elements), so the CUDA kernels take their 16-byte copy paths
  /// (and, where it applies, the warp kernel of the fused op); otherwise guards of 5 elements keep them misaligned.
  bool aligned = false;
  bool varlen() const { return !seqlens.empty(); }
  bool has_g() const { return decay != Decay::none; }
  std::string describe() const;
};

/// "[3,0,64]", for describe().
std::string seqlens_text(const std::vector<int64_t>& seqlens);

/// A spec for one sequence per batch row, or varlen sequences (sets B = 1, T = sum).
Spec fixed(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t BT);
Spec varlen(std::vector<int64_t> seqlens, int64_t H, int64_t HV, int64_t K, int64_t BT);

/// Compact host inputs of a spec; g is the natural-log chunk-local cumsum (in double, rounded to f32 once) of the
/// decays, restarted at every chunk of every sequence.
struct Inputs {
  HostTensor k, g, beta;        ///< g / beta: empty (shape {0}) when absent
  std::vector<int64_t> cu;      ///< cu_seqlens values (empty: fixed length)
  fuseops::reference::KktInputs golden_inputs(const Spec& s) const;
};
Inputs make_inputs(const Spec& s, std::mt19937_64& rng);
using fuseops::reference::cu_seqlens_of;  ///< cu_seqlens [0, l0, l0 + l1, ...]

/// A tensor in its own buffer between `guard` poisoned elements, rows padded by `pad` poisoned elements; on the host
/// and, for CUDA, mirrored on the device. Usage: construct -> upload() -> view() -> op -> download() -> read().
class Placed {
 public:
  /// An input holding `compact`.
  Placed(Where where, const HostTensor& compact, int64_t pad = 0, int64_t guard = 5);
  /// An output of `shape`, poisoned (NaN / int sentinel).
  Placed(Where where, DType dtype, std::vector<int64_t> shape, int64_t guard = 5);
  void upload() { ws_.upload(); }
  void download() { ws_.download(); }
  TensorView view() const { return ws_.view(region_); }
  HostTensor read() const { return ws_.read(region_); }
  /// Every element outside the tensor (guards, padding) is as uploaded; for an input, the tensor too.
  ::testing::AssertionResult untouched_outside(bool is_output) const;
  /// Output [B, T, heads(, inner)]: every element outside tokens [begin, end) of each (begin, end) range of batch
  /// row 0 is as uploaded.
  ::testing::AssertionResult untouched_outside_tokens(const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  const Region& region() const { return region_; }

 private:
  Workspace ws_;
  Region region_;
};

/// Everything the intra-chunk ops produce from one input set.
struct Results {
  HostTensor A;           ///< chunk_scaled_dot_kkt_fwd, out dtype
  HostTensor A32;         ///< chunk_scaled_dot_kkt_fwd, f32
  HostTensor Ai_unfused;  ///< solve_tril(A32), out dtype
  HostTensor Ai_fused;    ///< chunk_gated_delta_rule_fwd_kkt_solve, out dtype
  HostTensor Ai_from_A;   ///< solve_tril(A), out dtype
  HostTensor Ai_fused_again;  ///< the fused op run a second time
};

/// Runs every op on `in` (outputs poisoned first), checks that guards, padding and inputs are untouched (gtest
/// failures), and returns the outputs.
Results run_all(Where where, const Spec& s, const Inputs& in);


/// `out` against the golden with the stage's element bounds and the relative-RMS criterion
/// (reference::gdn_tolerance, gdn_rms_check); every element must be finite.
::testing::AssertionResult matches_golden(const HostTensor& out, const fuseops::reference::GdnGolden& gold,
                                          fuseops::reference::GdnStage stage, int64_t K, int64_t BT);

/// run_all + every comparison: A, Ai (fused) and solve_tril(A) against the golden; fused == unfused and fused ==
/// fused again, byte for byte. `check_inverse` false: only A is compared (wide keys).
void check_spec(Where where, const Spec& s, std::mt19937_64& rng, bool check_inverse = true);

// ---------------------------------------------------------------------------------------------------------------
// Malformed cu_seqlens (GdnMalformed, GdnIntraWarp)

struct BadCu {
  const char* what;
  std::vector<int64_t> cu;
  int64_t T;
  int64_t first_bad;  ///< the first sequence n the documented rule breaks (0 = cu[0] <= cu[n] <= cu[n+1] <= cu[N] = T)
};
/// Malformed cu_seqlens of every kind: decreasing, first != 0, last != T, negative, huge, with T = 0.
const std::vector<BadCu>& bad_cus();

/// The clamped token ranges of every sequence and the first bad sequence, by the backends' own rule.
struct Clamped {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t first_bad = -1;
};
Clamped clamped_ranges(const std::vector<int64_t>& cu, int64_t T);
/// After `op` ran on a malformed cu_seqlens: `msg` (take_device_error) names the op, cu_seqlens, the first bad
/// sequence and the rule; `inputs` are untouched and `out` is written only inside the sequences' clamped ranges
/// (downloads them all first); check_errors() is clear again.
void expect_malformed_outcome(const std::string& msg, const std::string& op, const Clamped& clamped,
                              const std::vector<Placed*>& inputs, Placed& out);

// ---------------------------------------------------------------------------------------------------------------
// Which kernel the fused op takes (CUDA builds; gdn_intra_warp.h). Elsewhere: a no-op guard and a zero count.

#if defined(FUSEOPS_WITH_CUDA)
using fuseops::detail::cuda::KktWarpForTesting;
#else
enum class KktWarpForTesting { rule, always, never };
#endif
/// The fused launches take `mode` until the guard's scope ends, then the launch rule again.
class WarpMode {
 public:
  explicit WarpMode(KktWarpForTesting mode);
  ~WarpMode();
  WarpMode(const WarpMode&) = delete;
  WarpMode& operator=(const WarpMode&) = delete;
};
/// How many fused launches of this process took the warp kernel.
int64_t warp_launches();

}  // namespace fuseops_test::gdn
