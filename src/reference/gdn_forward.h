// Float64 golden of the GDN forward ops (docs/ops/gdn.md): the token-by-token recurrence (include/fuseops/gdn_forward.h),
// evaluated in double, per sequence and value head, independent of the chunked algorithm:
//   S <- exp(g_t) S;  v'_t = beta_t (v_t - S^T k_t);  S <- S + k_t v'_t^T;  o_t = scale S^T q_t,
// beta_t a scalar per value head or, per channel, a vector of V (the product elementwise).
// Optional l2 normalisation of q and k (x / sqrt(sum x^2 + 1e-6)), rounded to the inputs' dtype when the op does so
// (the chunked path, as FLA), kept exact otherwise (the decode ops).
#pragma once

#include <cstdint>
#include <vector>

#include "fuseops/tensor.h"
#include "testing/host_tensor.h"

namespace fuseops::reference {

struct RecurrenceInputs {
  const testing::HostTensor* q = nullptr;  ///< [B, T, H, K]
  const testing::HostTensor* k = nullptr;  ///< [B, T, H, K]
  const testing::HostTensor* v = nullptr;  ///< [B, T, HV, V]
  std::vector<double> g;                   ///< raw log-decays [B * T * HV] (empty: 0)
  std::vector<double> beta;                ///< [B * T * HV], or [B * T * HV * V] with beta_per_channel (empty: 1)
  bool beta_per_channel = false;           ///< beta per value column: v'[j] = beta[j] (v[j] - (S^T k)[j])
  const testing::HostTensor* h0 = nullptr;  ///< [N, HV, K, V] (null: 0)
  double scale = 1.0;
  bool l2norm = false;
  bool round_normalized = false;  ///< round the normalised q, k to q's dtype
  std::vector<int64_t> cu_seqlens;  ///< empty: fixed length
  bool keep_token_states = false;   ///< also return the state after every token
  int64_t chunk_size = 0;           ///< > 0: also return the state at the start of every chunk of this many tokens
  std::vector<int64_t> heads;       ///< value heads to evaluate (empty: all); the others stay 0
};

struct RecurrenceGolden {
  std::vector<double> o;             ///< [B, T, HV, V]
  std::vector<double> final_state;   ///< [N, HV, K, V]
  std::vector<double> token_states;  ///< [B, T, HV, K, V] when requested
  /// with chunk_size: [B, NS, HV, K, V], the state before each chunk's tokens in the chunk slots of gdn_chunk_slots
  /// (fixed length: slot c of batch row b; varlen: chunk 0 of sequence n at slot n, chunk c >= 1 starting at token t
  /// at slot N + (t - 1) / chunk_size); slots of no chunk 0
  std::vector<double> chunk_states;
};

RecurrenceGolden gated_delta_rule_recurrence(const RecurrenceInputs& in);

/// The chunk slots of h (gdn_chunk_slots' layout, include/fuseops/gdn_forward.h), restated for the goldens and the
/// checks of tests and case sets (cu_seqlens empty: fixed length). The count NS: ceil(T / BT) per batch row, plus N
/// with cu_seqlens (N sequences).
int64_t chunk_slot_count(int64_t T, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens);
/// The slot of the chunk that starts at token t0 of sequence n, whose first token is bos: (t0 - bos) / BT of its
/// batch row at fixed length; with cu_seqlens n for the sequence's first chunk and N + (t0 - 1) / BT for a later one.
int64_t chunk_slot(int64_t n, int64_t bos, int64_t t0, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens);
/// Whether each slot of h [B, NS] (row-major: batch row, slot) holds a chunk's state: every slot at fixed length;
/// with cu_seqlens (B = 1) the slots of the sequences' chunks (an empty sequence has none), the others are not
/// written by the ops.
std::vector<bool> chunk_slots_used(int64_t B, int64_t T, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens);

/// Stage goldens: each stage's formula in double from the stage's own inputs (as stored, exact), fixed length or varlen.
/// g: the chunk-local cumsum [B, T, HV] (empty: no gating). Outputs are compact row-major.
struct StageInputs {
  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0, BT = 64;
  std::vector<int64_t> cu_seqlens;
  std::vector<double> g;
};
/// w = A (beta e^g k), u = A (beta v): A [B, T, HV, BT] (lower part incl. the diagonal is read), k [B, T, H, K],
/// v [B, T, HV, V], beta [B, T, HV].
void recompute_w_u_golden(const StageInputs& s, const std::vector<double>& A, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& beta, std::vector<double>& w,
                          std::vector<double>& u);
/// h [B, NS, HV, K, V] (slots as gdn_chunk_slots; unused slots 0), v_new [B, T, HV, V], final [N, HV, K, V] from
/// k, w [B, T, HV, K], u [B, T, HV, V], h0 [N, HV, K, V] (empty: 0).
void fwd_h_golden(const StageInputs& s, const std::vector<double>& k, const std::vector<double>& w,
                  const std::vector<double>& u, const std::vector<double>& h0, std::vector<double>& h,
                  std::vector<double>& v_new, std::vector<double>& final_state);
/// o [B, T, HV, V] from q, k [B, T, H, K], v_new [B, T, HV, V], h [B, NS, HV, K, V].
void fwd_o_golden(const StageInputs& s, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v_new, const std::vector<double>& h, double scale,
                  std::vector<double>& o);

/// All elements of a host tensor as double (row-major).
std::vector<double> values_of(const testing::HostTensor& t);

/// The relative-RMS criterion of the GDN forward ops, by the dtype of the inputs (q, k, v): 5e-3 for f16 / bf16,
/// 1e-4 for f32 (docs/ops/gdn.md, "Tolerances").
double gdn_forward_rel_rms_limit(DType input_dtype);

struct ForwardCheck {
  bool pass = false;
  double rel_rms_error = 0;
  double max_abs_error = 0;
  double limit = 0;
  int64_t nonfinite = 0;
};
/// ||out - ref|| <= limit * ||ref|| + 1e-12 sqrt(n), every output element finite. `out`'s row-major elements
/// correspond to `ref`. limit: gdn_forward_rel_rms_limit(input_dtype) unless `limit_override` > 0.
ForwardCheck gdn_forward_check(const testing::HostTensor& out, const std::vector<double>& ref, DType input_dtype,
                               double limit_override = 0);

}  // namespace fuseops::reference
