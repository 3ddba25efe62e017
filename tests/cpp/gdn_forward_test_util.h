// Helpers of the GDN forward tests: inputs, runs of the prefill and decode ops on placed tensors (guards and padding
// checked), and the float64 recurrence golden (src/reference/gdn_forward.h).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gdn_test_util.h"
#include "reference/gdn_forward.h"

namespace fuseops_test::gdn_forward {

using gdn::Decay;

struct Spec {
  int64_t B = 1, T = 0, H = 1, HV = 1, K = 64, V = 64, BT = 64;
  std::vector<int64_t> seqlens;  ///< varlen when non-empty (B = 1, T = the sum)
  DType dtype = DType::bf16;     ///< q, k, v
  DType gate_dtype = DType::f32;  ///< g, beta
  bool beta_per_channel = false;   ///< beta [B, T, HV, V] (one per value column) instead of [B, T, HV]
  DType h0_dtype = DType::f32;
  bool has_h0 = true;
  bool l2norm = false;  ///< then q, k are raw normal vectors, else k is unit-norm
  bool padded = false;  ///< q, k, v rows padded (non-contiguous)
  /// Every tensor starts 16-byte aligned (guards, and padding when `padded`, of 8 elements): the 16-byte vector
  /// paths of the CUDA kernels (the decode fast kernel needs aligned states, docs/ops/gdn-log.md "decode kernel");
  /// otherwise guards of 5 elements (and padding of 3 / 5 / 2) keep rows misaligned.
  bool aligned = false;
  /// Guard elements before o where >= 0 (else as the others): e.g. 2 puts a 16-bit o's rows at 4-byte alignment only
  int64_t o_guard = -1;
  /// Guard elements before h0 and final_state where >= 0: e.g. 1 breaks their pair alignment
  int64_t state_guard = -1;
  /// Guard elements before h (run_chunk with_states) where >= 0: e.g. 1 puts a 16-bit h 2 bytes off 16-byte alignment
  int64_t h_guard = -1;
  Decay decay = Decay::realistic;
  DType cu_dtype = DType::i32;
  std::optional<double> scale;  ///< none: K^-0.5
  bool varlen() const { return !seqlens.empty(); }
  int64_t N() const { return varlen() ? static_cast<int64_t>(seqlens.size()) : B; }
  std::string describe() const;
};
Spec fixed(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, DType dtype);
Spec varlen(std::vector<int64_t> seqlens, int64_t H, int64_t HV, int64_t K, int64_t V, DType dtype);

struct Inputs {
  HostTensor q, k, v, g, beta, h0;  ///< g: raw per-token log-decays; h0 empty (shape {0}) when absent
  std::vector<int64_t> cu;
};
Inputs make_inputs(const Spec& s, std::mt19937_64& rng);
/// A per-head beta [B, T, HV] repeated over V value columns: [B, T, HV, V] of the same dtype, every column equal.
HostTensor beta_over_columns(const HostTensor& beta, int64_t V);

/// The golden of the spec's inputs (token recurrence; `round_normalized` for the chunked path, where the op rounds the
/// normalised q, k: to its intermediate dtype, so the golden rounds them only where that is the input dtype).
/// `chunk_states`: also the state at the start of every chunk of s.BT tokens, in the chunk slots (chunk_states).
fuseops::reference::RecurrenceGolden golden(const Spec& s, const Inputs& in, bool round_normalized,
                                            bool keep_token_states = false, bool chunk_states = false);

struct Outputs {
  HostTensor o, final_state;
  HostTensor h;  ///< run_chunk with_states: the chunk states [B, NS, HV, K, V] (slots of no chunk: NaN, as poisoned)
  bool h_aligned16 = false;  ///< run_chunk with_states: whether h's data pointer was 16-byte aligned
};
/// chunk_gated_delta_rule on placed copies of `in` (output_final_state = true); guards and inputs checked. With
/// `with_states`, chunk_gated_delta_rule_with_states into a poisoned h of the intermediate dtype, on a workspace of the
/// size the query gives for it, behind guards that must stay untouched.
Outputs run_chunk(Where where, const Spec& s, const Inputs& in, bool with_states = false);
/// fused_recurrent_gated_delta_rule (FLA form) on placed copies of `in`.
Outputs run_recurrent(Where where, const Spec& s, const Inputs& in);

/// o and final_state against the golden (gtest assertion with the spec and the errors).
/// `limit` > 0 replaces the dtype's limit (documented cases only).
::testing::AssertionResult matches(const HostTensor& out, const std::vector<double>& ref, DType input_dtype,
                                   const std::string& what, double limit = 0);
/// The largest |chunk-local cumsum of g| of the spec's inputs: the decay factors exp(g_i - g_j) of the chunked
/// algorithm carry a relative error up to about this times 2^-24 (fp32 rounding of the cumsum).
double max_abs_cumsum(const Spec& s, const Inputs& in);
/// The relative-RMS limit of the chunked forward against the golden: the dtype's, plus the fp32 rounding of the
/// chunk-local cumsum (max_abs_cumsum 2^-24; docs/ops/gdn.md "Tolerances").
double forward_limit(const Spec& s, const Inputs& in);

/// The tokens [t0, t1) of every batch row of a compact [B, T, ...] tensor.
HostTensor tokens(const HostTensor& x, int64_t t0, int64_t t1);
/// q, k, v, g, beta of tokens [t0, t1) of every batch row of fixed-length inputs (h0 and cu left empty).
Inputs tokens(const Inputs& in, int64_t t0, int64_t t1);

/// Split run of a fixed-length spec: chunk_gated_delta_rule on tokens [0, T1), then on [T1, T) from the returned
/// state; o of both runs and the last final_state against the golden of all T tokens (gtest assertions).
void check_split_run(Where where, const Spec& s, int64_t T1, std::mt19937_64& rng);

}  // namespace fuseops_test::gdn_forward
