// fuseops public API: Gated DeltaNet (GDN) forward — the chunked prefill (`chunk_gated_delta_rule` and its stages)
// and the token-by-token decode (`fused_recurrent_gated_delta_rule` and the vLLM serving forms).
//
// Semantics: flash-linear-attention (FLA) 0.5.2 `chunk_gated_delta_rule`, `recompute_w_u_fwd`,
// `chunk_gated_delta_rule_fwd_h`, `chunk_fwd_o`, `fused_recurrent_gated_delta_rule`; vLLM's `fused_recurrent`
// (state pool, `ssm_state_indices`, `num_accepted_tokens`) and `fused_sigmoid_gating_delta_rule_update`
// (FLA `fla/ops/gated_delta_rule/{chunk,wy_fast,fused_recurrent}.py`, `fla/ops/common/{chunk_delta_h,chunk_o}.py`;
// vLLM `vllm/model_executor/layers/fla/ops/{fused_recurrent,fused_sigmoid_gating_delta_rule_update}.py`).
// Per sequence and value head, with state S (K x V, fp32) and the token recurrence
//   S <- exp(g_t) S;  v'_t = beta_t (v_t - S^T k_t);  S <- S + k_t v'_t^T;  o_t = scale S^T q_t
// (beta_t a scalar per value head; the decode ops also take it per value column, multiplied elementwise).
// The chunked ops compute exactly this (to rounding) in chunks of BT tokens; docs/ops/gdn.md has the math, the
// stages, the tolerances and the performance.
//
// Notation as in fuseops/gdn.h: B batch, T tokens per batch row, H key heads, HV value heads (a multiple of H; value
// head h reads key head h / (HV / H)), K key head dim and V value head dim (1..256), BT chunk size (16, 32 or 64),
// N sequences (B, or cu_seqlens.shape[0] - 1 with cu_seqlens, then B = 1). Sequences, chunks and the handling of a
// malformed cu_seqlens are those of fuseops/gdn.h. g of the stages is the natural-log CHUNK-LOCAL cumsum (f32) of the
// per-token log-decays (chunk_local_cumsum); g of the top-level op and of the decode ops is the raw per-token log-decay.
// Valid data has finite g <= 0 (the chunk sums must stay finite in fp32: |g| summed over a chunk < 3e38).
//
// State layout [N, HV, K, V] (FLA's default; `state_v_first` is not supported). In-place states: final_state may be
// initial_state itself (the same data, dtype f32, shape and strides; FLA's reuse of one state buffer) in
// chunk_gated_delta_rule, chunk_gated_delta_rule_fwd_h and fused_recurrent_gated_delta_rule, with the same result as
// separate buffers: the one kernel that reads initial_state also writes final_state, and each of its units (sequence,
// value head, column slice of V) reads its state elements before writing the same elements, which no other unit or
// stage touches (chunk_gated_delta_rule's later stages read the copy in h, not initial_state). Any other overlap of
// final_state with initial_state (or with any input) is an Error naming final_state. Every op writes every element of
// its outputs that is defined, never synchronises with the host and is capturable in a CUDA graph.
//
// Float scalars (scale, softplus_beta, softplus_threshold) are used in fp32: each must be finite in fp32 (|x| <=
// 3.4e38) and not a nonzero value that rounds to 0 there (|x| <= 7e-46); 0 itself is valid.
//
// Errors: fuseops::Error (invalid_argument) naming the argument for a bad rank, shape, dtype, device, stride, overlap,
// chunk size or float scalar; unsupported for CUDA tensors in a build without CUDA. A shape mismatch names the argument
// that disagrees with the others: q defines B, T, H, K (as FLA) and k must match it, unless k fits v and q does not
// (then q is named); v is named when the per-head tensors beside it (g and beta, a and b, g and h) agree against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "fuseops/tensor.h"

namespace fuseops {

/// Number of per-chunk state slots NS of `h` for chunk_gated_delta_rule_fwd_h / chunk_fwd_o: ceil(T / BT) per batch
/// row without cu_seqlens; with cu_seqlens (B = 1, N sequences) N + ceil(T / BT) slots, an upper bound on the chunk
/// count found without reading cu_seqlens (chunk 0 of sequence n is slot n; chunk c >= 1 starting at token t is slot
/// N + (t - 1) / BT; other slots are not written). Error (invalid_argument) naming T or N when negative, and N
/// when N + ceil(T / BT) does not fit in int64.
int64_t gdn_chunk_slots(int64_t T, int64_t N, int64_t chunk_size, bool varlen);

/// w = Ai (beta * exp(g) * k), u = Ai (beta * v), chunk by chunk (the WY representation).
/// k: [B, T, H, K]; v: [B, T, HV, V]; beta: [B, T, HV]; A (the solved (I + A)^{-1} of
/// chunk_gated_delta_rule_fwd_kkt_solve): [B, T, HV, BT]; g (optional chunk-local cumsum): [B, T, HV] f32.
/// w (out): [B, T, HV, K]; u (out): [B, T, HV, V]; contiguous. Inputs f32 / f16 / bf16 with innermost stride 1,
/// BT = A.shape[3]. As FLA `recompute_w_u_fwd(k, v, beta, A, g, cu_seqlens)`. Rounding: where k, v, A, w and u share one
/// 16-bit dtype the CUDA backend multiplies the raw k and v by A diag(beta e^g) and A diag(beta), each rounded once to
/// that dtype, where FLA rounds beta e^g k and beta v (one rounding per term either way; docs/ops/gdn.md "Numerics");
/// other dtypes are computed in fp32 without intermediate rounding.
void recompute_w_u_fwd(TensorView w, TensorView u, TensorView k, TensorView v, TensorView beta, TensorView A,
                       const TensorView* g = nullptr, const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// The state recurrence across chunks. Per sequence and value head, from S = initial_state (0 when absent), for each
/// chunk c in order: h[slot(c)] = S; v_new = u - w S; S = exp(g_last) S + k^T (exp(g_last - g) * v_new), g_last = g
/// of the chunk's last valid row. final_state = S after the last chunk (the initial state for an empty sequence).
/// k: [B, T, H, K]; w: [B, T, HV, K]; u: [B, T, HV, V]; g (optional): [B, T, HV] f32 chunk-local cumsum;
/// initial_state (optional): [N, HV, K, V] f32 / f16 / bf16 (read as f32), contiguous.
/// h (out): [B, NS, HV, K, V] (NS = gdn_chunk_slots), f32 / f16 / bf16; v_new (out): [B, T, HV, V] (ungated);
/// final_state (out, optional): [N, HV, K, V] f32, may be initial_state itself (in place, see above). Outputs
/// contiguous. As FLA `chunk_gated_delta_rule_fwd_h`, with
/// h indexed by chunk slot (see gdn_chunk_slots) rather than FLA's compacted chunk list.
void chunk_gated_delta_rule_fwd_h(TensorView h, TensorView v_new, TensorView* final_state, TensorView k,
                                  TensorView w, TensorView u, const TensorView* g, const TensorView* initial_state,
                                  int64_t chunk_size = 64, const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// o_i = scale * (exp(g_i) q_i^T h[chunk] + sum_{j <= i in the chunk} (q_i . k_j) exp(g_i - g_j) v_new_j).
/// q, k: [B, T, H, K]; v_new: [B, T, HV, V]; h: [B, NS, HV, K, V] from chunk_gated_delta_rule_fwd_h; g (optional):
/// [B, T, HV] f32 chunk-local cumsum. o (out): [B, T, HV, V] f32 / f16 / bf16, contiguous. h must be contiguous (as
/// chunk_gated_delta_rule_fwd_h writes it). As FLA `chunk_fwd_o`.
void chunk_fwd_o(TensorView o, TensorView q, TensorView k, TensorView v_new, TensorView h, const TensorView* g,
                 double scale, int64_t chunk_size = 64, const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// Bytes of device (or host, for CPU tensors) scratch memory chunk_gated_delta_rule needs for these arguments, or with
/// `with_states` chunk_gated_delta_rule_with_states (no more: that op writes the chunk states to its h, and its
/// workspace has no region for them, so the size is smaller wherever there are chunk slots and equal where there are
/// none, e.g. T = 0 without cu_seqlens; the size without with_states is enough for it too).
/// Validates what the size depends on: q's and v's shapes, the chunk size and cu_seqlens' count (Error naming
/// chunk_gated_delta_rule_workspace_size and the argument: cu_seqlens when its sequence count alone takes the size past
/// 64 bits, or the chunk states [B, NS, HV, K, V] past 64 bits, also with with_states, else q or v). It does not check
/// what only the op needs (q and v of one dtype and device, the other arguments): the op itself refuses those, so a
/// size returned here does not promise the call passes.
std::size_t chunk_gated_delta_rule_workspace_size(const TensorView& q, const TensorView& v,
                                                  const TensorView* cu_seqlens = nullptr,
                                                  bool use_qk_l2norm_in_kernel = false, int64_t chunk_size = 64,
                                                  bool with_states = false);
/// The same query for a caller that sizes the workspace on behalf of an op the user called (a binding of
/// chunk_gated_delta_rule): errors name `op` instead (null or empty: chunk_gated_delta_rule_workspace_size).
std::size_t chunk_gated_delta_rule_workspace_size_for(const char* op, const TensorView& q, const TensorView& v,
                                                      const TensorView* cu_seqlens, bool use_qk_l2norm_in_kernel,
                                                      int64_t chunk_size);
/// The same with k as well, so that a shape error names the argument chunk_gated_delta_rule itself would (q where k
/// fits v and q does not; without k the query can only blame v); `with_states` as above.
std::size_t chunk_gated_delta_rule_workspace_size_for(const char* op, const TensorView& q, const TensorView& k,
                                                      const TensorView& v, const TensorView* cu_seqlens,
                                                      bool use_qk_l2norm_in_kernel, int64_t chunk_size,
                                                      bool with_states = false);

/// dtype in which chunk_gated_delta_rule stores its intermediates (the normalised q and k, the solved (I + A)^-1, w, u,
/// v_new and the chunk states h) for inputs of `dtype` with head dims K and V: the input dtype, as FLA, except f32
/// for f16 / bf16 inputs with K < 32 or V < 32. With so few dimensions a head's output is a short sum of terms that
/// cancel, and 16-bit intermediates miss the 16-bit accuracy bound by up to 20x (docs/ops/gdn.md, Tolerances).
/// Throws Error (invalid_argument) naming the argument for a dtype other than f32 / f16 / bf16 or a head dim outside
/// [1, 256] (what chunk_gated_delta_rule accepts).
DType chunk_gated_delta_rule_intermediate_dtype(DType dtype, int64_t head_k_dim, int64_t head_v_dim);

/// The chunked GDN forward (prefill), as FLA `chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state,
/// output_final_state, use_qk_l2norm_in_kernel, cu_seqlens)`: optional l2 normalisation of q and k
/// (x * (1 / sqrt(sum x^2 + 1e-6)) in fp32, rounded to the intermediate dtype: FLA's l2norm_fwd rounds to the input
/// dtype), chunk_local_cumsum of g, the fused kkt + solve, then recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h and
/// chunk_fwd_o, with intermediates in chunk_gated_delta_rule_intermediate_dtype().
/// q, k: [B, T, H, K]; v: [B, T, HV, V] (q, k, v one dtype: f32 / f16 / bf16, innermost stride 1); g (raw per-token
/// log-decay): [B, T, HV] f32 / f16 / bf16; beta: [B, T, HV] f32 / f16 / bf16; initial_state (optional):
/// [N, HV, K, V] f32 / f16 / bf16 (read as f32), contiguous. o (out): [B, T, HV, V] in q's dtype, contiguous; final_state (out, optional):
/// [N, HV, K, V] f32 contiguous, may be initial_state itself (in place, see above). scale: none = K^-0.5. workspace: a contiguous tensor of any dtype on the op's
/// device with at least chunk_gated_delta_rule_workspace_size() bytes, 16-byte aligned; a default TensorView() stands
/// for none (0 bytes: enough only where chunk_gated_delta_rule_workspace_size() says 0, e.g. fixed length with no
/// tokens; with cu_seqlens it is not 0 even at T = 0).
void chunk_gated_delta_rule(TensorView o, TensorView* final_state, TensorView q, TensorView k, TensorView v,
                            TensorView g, TensorView beta, std::optional<double> scale,
                            const TensorView* initial_state, bool use_qk_l2norm_in_kernel,
                            const TensorView* cu_seqlens, TensorView workspace, int64_t chunk_size = 64,
                            Stream stream = {});

/// chunk_gated_delta_rule that also writes its chunk states, the state at the start of every chunk (before the chunk's
/// tokens; chunk 0 of a sequence: its initial state, or 0), as vLLM's vendored FLA `chunk_gated_delta_rule(...,
/// return_intermediate_states=True)` returns them for prefix caching (vLLM
/// `vllm/model_executor/layers/fla/ops/chunk.py`; FLA's `h` of `chunk_gated_delta_rule_fwd_h`), with one forward: h is
/// the same tensor the op computes for its own output stage, written to the caller's memory instead of the workspace.
/// h (out): [B, NS, HV, K, V] with NS = gdn_chunk_slots(T, N, chunk_size, cu_seqlens != nullptr), dtype
/// chunk_gated_delta_rule_intermediate_dtype(q's dtype, K, V) (q's, or f32 for f16 / bf16 with K or V < 32),
/// contiguous; slots as chunk_gated_delta_rule_fwd_h's h (rounded once from the f32 state to h's dtype):
///  - without cu_seqlens, h[b, c] is the state of batch row b before its tokens [c BT, (c + 1) BT), c < ceil(T / BT);
///  - with cu_seqlens (B = 1, N sequences), chunk 0 of sequence n is h[0, n] and its chunk c >= 1, starting at token
///    t = cu_seqlens[n] + c BT, is h[0, N + (t - 1) / BT]; an empty sequence has no chunk, and the slots of no chunk
///    are not written.
/// Everything else as chunk_gated_delta_rule: the same arguments, checks and errors (named
/// chunk_gated_delta_rule_with_states), and on the CPU backend the same bytes of o and final_state. On CUDA o comes from
/// the output stage that reads h (fwd_h, then chunk_fwd_o), never from the form of chunk_gated_delta_rule that keeps h
/// in the recurrence's kernel (chunk_gated_delta_rule_fwd_h_o, where it applies): o and final_state equal
/// chunk_gated_delta_rule's within the forward's tolerance (docs/ops/gdn.md), not always byte for byte. workspace: at
/// least chunk_gated_delta_rule_workspace_size(q, v, cu_seqlens, use_qk_l2norm_in_kernel, chunk_size, true) bytes
/// (the size without with_states is enough too). Errors naming h: a rank, shape, dtype or device other than those
/// above, a strided h, an h that overlaps itself or any other argument (o, final_state, workspace, the inputs).
void chunk_gated_delta_rule_with_states(TensorView o, TensorView h, TensorView* final_state, TensorView q,
                                        TensorView k, TensorView v, TensorView g, TensorView beta,
                                        std::optional<double> scale, const TensorView* initial_state,
                                        bool use_qk_l2norm_in_kernel, const TensorView* cu_seqlens,
                                        TensorView workspace, int64_t chunk_size = 64, Stream stream = {});

/// The token recurrence for any number of tokens (decode), as FLA `fused_recurrent_gated_delta_rule(q, k, v, g,
/// beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens)`: q, k, v, g (raw, absent:
/// 0) as in chunk_gated_delta_rule; l2 normalisation in f32, not re-rounded. beta (absent: 1), f32 / f16 / bf16: per
/// head [B, T, HV], or per value column [B, T, HV, V] with innermost stride 1 (FLA's per-channel beta, taken where
/// beta has the rank of v): v'_t[j] = beta_t[j] (v_t[j] - (S^T k_t)[j]) for each column j, the rest unchanged; any
/// other rank or shape is an Error naming beta with the expected shape. initial_state (optional, read-only unless it
/// is final_state): [N, HV, K, V] f32 / f16 / bf16, contiguous. o (out): [B, T, HV, V] in q's dtype; final_state (out,
/// optional): [N, HV, K, V] f32, may be initial_state itself (in place, see above). Outputs contiguous.
void fused_recurrent_gated_delta_rule(TensorView o, TensorView* final_state, TensorView q, TensorView k,
                                      TensorView v, const TensorView* g, const TensorView* beta,
                                      std::optional<double> scale, const TensorView* initial_state,
                                      bool use_qk_l2norm_in_kernel = false, const TensorView* cu_seqlens = nullptr,
                                      Stream stream = {});

/// The serving form of vLLM's `fused_recurrent_gated_delta_rule` (inplace_final_state): the states live in a pool
/// state_pool [S, HV, K, V] (f32, bf16 or f16: the choices of vLLM's --mamba-ssm-cache-dtype; read as f32, rounded
/// to its dtype where written), updated in place: each slot's [HV, K, V] contiguous, the slots stride(0) >= HV K V
/// elements apart (vLLM's pools are views into padded pages, torch.as_strided with stride(0) the page's
/// elements); Error naming state_pool for a slot that is not contiguous or slots that overlap (stride(0) < HV K V,
/// S > 1). The padding between slots is neither read nor written. ssm_state_indices (i32 / i64, contiguous):
///  - [N]: sequence n reads and, after its last token, writes slot ssm_state_indices[n];
///  - [N, Tmax] (speculative decoding): sequence n reads slot ssm_state_indices[n, num_accepted_tokens[n] - 1]
///    (column 0 without num_accepted_tokens) and writes the state after its token t to slot ssm_state_indices[n, t].
/// Index -1 is a padding slot: nothing is read (a padding start slot: the sequence's o rows are written as 0 and no
/// state is written) or written there. An index < -1 or >= S, a num_accepted_tokens outside [1, Tmax] or a sequence
/// longer than Tmax is recorded in the device error record and treated as padding; the op returns normally (on the
/// CPU backend as on CUDA) and only fuseops::check_errors() raises the record (see fuseops/error.h).
/// num_accepted_tokens (optional, only with [N, Tmax] indices): [N] i32 / i64. Both may have N' > N rows (Error
/// naming the argument below N): rows past N are not read (vLLM passes its padded batch's indices with the real
/// sequences' cu_seqlens[:num_decodes + 1], vllm/v1/attention/backends/gdn_attn.py). cu_seqlens may end before T
/// (cu_seqlens[N] < T, vLLM's CUDA-graph padded steps): the tokens past cu_seqlens[N] belong to no sequence, their o
/// rows are written as 0 and nothing is recorded (the FLA form above records cu_seqlens[N] != T as malformed). Other
/// arguments as in fused_recurrent_gated_delta_rule, beta per head [B, T, HV] or per value column [B, T, HV, V] included.
/// Precondition NOT checked (the indices live on the device): no slot may be used by two sequences of one call, i.e.
/// no sequence may read or write a slot that another sequence of the same call writes (two sequences on one pool
/// slot). The sequences run concurrently, so such a call gives an unspecified state in that slot and unspecified
/// outputs for the sequences involved; it is not detected, not recorded for check_errors(), and not an Error.
void fused_recurrent_gated_delta_rule_update(TensorView o, TensorView state_pool, TensorView q, TensorView k,
                                             TensorView v, const TensorView* g, const TensorView* beta,
                                             std::optional<double> scale, TensorView ssm_state_indices,
                                             const TensorView* num_accepted_tokens = nullptr,
                                             bool use_qk_l2norm_in_kernel = false,
                                             const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// fused_recurrent_gated_delta_rule_update under vLLM's name for it: vLLM's `fused_recurrent_gated_delta_rule` with
/// `ssm_state_indices` (inplace_final_state), the pool passed as `initial_state`. The same op, rules and results; its
/// errors, the recorded bad indices included, name `fused_recurrent_gated_delta_rule` and the pool `initial_state`
/// (the Python function of that name calls this form).
void fused_recurrent_gated_delta_rule(TensorView o, TensorView initial_state, TensorView q, TensorView k, TensorView v,
                                      const TensorView* g, const TensorView* beta, std::optional<double> scale,
                                      TensorView ssm_state_indices, const TensorView* num_accepted_tokens = nullptr,
                                      bool use_qk_l2norm_in_kernel = false, const TensorView* cu_seqlens = nullptr,
                                      Stream stream = {});

/// fused_recurrent_gated_delta_rule_update with the gates computed from the raw projections inside the kernel, as
/// vLLM's `fused_sigmoid_gating_delta_rule_update`: g = -exp(A_log[h]) * softplus(a + dt_bias[h]) and
/// beta = sigmoid(b), softplus(x) = log(1 + exp(softplus_beta x)) / softplus_beta, or x where softplus_beta x >
/// softplus_threshold. A_log, dt_bias: [HV] f32 / f16 / bf16; a, b: [B, T, HV] f32 / f16 / bf16 (per head only: b has
/// no per-channel form, as in vLLM). The pool and its
/// indices take vLLM's names for this function, initial_state_source (the state_pool above) and initial_state_indices
/// (ssm_state_indices above, with the same rules); errors, the recorded bad indices included, use these names.
void fused_sigmoid_gating_delta_rule_update(TensorView o, TensorView initial_state_source, TensorView A_log,
                                            TensorView a, TensorView dt_bias, TensorView q, TensorView k, TensorView v,
                                            TensorView b, std::optional<double> scale, TensorView initial_state_indices,
                                            const TensorView* num_accepted_tokens = nullptr,
                                            bool use_qk_l2norm_in_kernel = false,
                                            const TensorView* cu_seqlens = nullptr, double softplus_beta = 1.0,
                                            double softplus_threshold = 20.0, Stream stream = {});

}  // namespace fuseops
