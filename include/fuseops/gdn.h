// fuseops public API: Gated DeltaNet (GDN) intra-chunk stage.
//
// Semantics: flash-linear-attention (FLA) 0.5.2 `chunk_local_cumsum`, `chunk_scaled_dot_kkt_fwd`, `solve_tril` and
// the fused kkt+solve kernel of `chunk_gated_delta_rule_fwd_intra` (FLA `fla/ops/utils/cumsum.py`,
// `fla/ops/common/chunk_scaled_dot_kkt.py`, `fla/ops/utils/solve_tril.py`, `fla/ops/gated_delta_rule/chunk_fwd.py`),
// with these deliberate differences: `g` is the natural-log chunk-local cumsum (FLA >= 0.5 feeds log2-scaled values
// to exp2 internally; we do not accept those), and every output element is written (no pre-zeroed buffer needed).
// docs/ops/gdn.md has the math, layouts, tolerances and performance.
//
// Notation: B batch, T tokens per batch row, H key heads, HV value heads (a multiple of H; value head h reads key
// head h / (HV / H)), K head dim (1..256), BT chunk size (16, 32 or 64), N sequences.
//
// Chunks: without cu_seqlens, batch row b holds one sequence of T tokens; with cu_seqlens ([N+1] int32 / int64 on
// the tensors' device, B = 1), sequence n holds tokens [cu_seqlens[n], cu_seqlens[n+1]). Chunk c of a sequence
// starting at token bos covers tokens [bos + c*BT, min(bos + (c+1)*BT, eos)); chunks never cross sequences.
// cu_seqlens is read on the device without a host synchronisation (the ops are capturable in CUDA graphs). A
// malformed cu_seqlens (first != 0, decreasing, last != T) never causes an out-of-bounds access: the op records it in
// the device error record, runs each sequence on its bounds clamped into [0, T], leaves rows outside every sequence's
// clamped range unwritten (docs/ops/gdn.md, "Variable length") and returns normally, on the CPU backend too (which
// checks the values as it runs but records them the same way, to match CUDA). Only fuseops::check_errors() raises the
// record (Error of kind device_value); call it after the op (or set FUSEOPS_DEBUG=1) to learn about bad values.
//
// Errors: fuseops::Error (invalid_argument) naming the argument for a bad rank, shape, dtype, device, stride or
// chunk size; unsupported for CUDA tensors in a build without CUDA.
#pragma once

#include <cstdint>
#include <optional>

#include "fuseops/tensor.h"

namespace fuseops {

/// Chunk-local cumulative sum of log-decays: out[t] = scale * sum of g over the tokens of t's chunk up to and
/// including t (reverse: from t to the chunk's end). Restarts at every chunk and every sequence.
/// g: [B, T, HV] f32 / f16 / bf16 (any non-negative strides). out: [B, T, HV] f32 (any non-negative strides; its
/// address range may not overlap g's, so interleaved views of one buffer are refused even where they share no element).
/// scale: multiplies after the sum (none: 1), in fp32: an Error names it when it is not finite in fp32 or is nonzero
/// but rounds to 0 there. As FLA `chunk_local_cumsum(g, chunk_size, reverse, scale,
/// cu_seqlens)` with output_dtype f32.
void chunk_local_cumsum(TensorView out, TensorView g, int64_t chunk_size, const TensorView* cu_seqlens = nullptr,
                        bool reverse = false, std::optional<double> scale = std::nullopt, Stream stream = {});

/// A[t, j] = beta_t * <k_t, k_s> * exp(g_t - g_s) for s = the j-th token of t's chunk, s < t; 0 elsewhere
/// (diagonal, above it, and columns at or past the chunk's valid length).
/// k: [B, T, H, K] f32 / f16 / bf16, innermost stride 1. g (optional, natural-log chunk-local cumsum): [B, T, HV]
/// f32. beta (optional, default 1): [B, T, HV] f32 / f16 / bf16. A (out): [B, T, HV, BT] f32 / f16 / bf16,
/// contiguous. HV = g.shape[2], else beta.shape[2], else H. As FLA `chunk_scaled_dot_kkt_fwd`.
void chunk_scaled_dot_kkt_fwd(TensorView A, TensorView k, const TensorView* g, const TensorView* beta,
                              int64_t chunk_size, const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// Ai = (I + A)^{-1} per chunk: unit lower triangular, 0 above the diagonal and in columns at or past the chunk's
/// valid length. Reads only the strictly lower valid entries of A.
/// A: [B, T, HV, BT] f32 / f16 / bf16 (innermost stride 1). Ai (out): [B, T, HV, BT] f32 / f16 / bf16, contiguous;
/// BT = A.shape[3] in {16, 32, 64}. As FLA `solve_tril`.
void solve_tril(TensorView Ai, TensorView A, const TensorView* cu_seqlens = nullptr, Stream stream = {});

/// The fused intra-chunk stage in one launch: Ai = solve_tril(chunk_scaled_dot_kkt_fwd(k, g, beta)), with no
/// intermediate in device memory. Same arguments as chunk_scaled_dot_kkt_fwd; Ai: [B, T, HV, BT]. On one device and
/// dispatch path, the result is bitwise identical to solve_tril(chunk_scaled_dot_kkt_fwd(..., A in f32)) with the
/// same output dtype. As the fused kkt + solve kernel of FLA's `chunk_gated_delta_rule_fwd_intra`
/// (`chunk_gated_delta_rule_fwd_kkt_solve_kernel`; FLA has no function of this name).
void chunk_gated_delta_rule_fwd_kkt_solve(TensorView Ai, TensorView k, const TensorView* g, const TensorView* beta,
                                          int64_t chunk_size = 64, const TensorView* cu_seqlens = nullptr,
                                          Stream stream = {});

}  // namespace fuseops
