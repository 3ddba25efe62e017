// fuseops public API: gated normalisation (RMSNorm / LayerNorm with an optional SiLU gate, per group).
//
// Semantics: flash-linear-attention (FLA) `fla/modules/layernorm_gated.py` `layer_norm_fwd` / `layernorm_fn` /
// `rmsnorm_fn` (Tri Dao's Mamba-2 gated norm; vLLM's `layernorm_guard.py` is the same math), which Qwen3-Next uses as
// the output norm of its Gated DeltaNet layers. docs/ops/norm.md has the math, tolerances and performance.
//
// Notation: x is [..., N]; its leading dims are flattened into M rows. The width N is split into N / G groups of
// G = group_size consecutive elements; every (row, group) is normalised on its own, with statistics in fp32:
//   if z and not norm_before_gate:  x <- x * silu(z)                       (gate applied before the norm)
//   RMSNorm:   rstd = 1 / sqrt(mean(x^2) + eps),              xhat = x * rstd
//   LayerNorm: mean = mean(x), rstd = 1 / sqrt(mean((x - mean)^2) + eps), xhat = (x - mean) * rstd
//   y = xhat * weight (+ bias)                                 (weight, bias: [N], indexed across the groups)
//   if z and norm_before_gate:      y <- y * silu(z)                       (gate applied after the norm)
// with silu(z) = z / (1 + e^-z). The output is rounded once, to x's dtype.
//
// Range: the statistics are fp32 sums of squares (of x for RMSNorm, of x - mean for LayerNorm), so a group whose sum of
// G squares overflows fp32 (magnitudes above ~1.8e19 / sqrt(G): f32 x = 3e19 at any G, a constant row of 1.5e17 at G
// = 16384) makes the variance inf and rstd 0: the group's outputs are then 0 (NaN for an inf element; plus bias), not
// the normalised values of the exact math. Not detected; scale such inputs down first. f16 inputs cannot reach this
// range; f32 and bf16 inputs can.
//
// Statistics: mean and rstd are f32 [N / G * M], group-major (entry g * M + m for group g of row m), as FLA returns
// them for its backward. Both are optional outputs: a null pointer skips the store (inference needs neither).
//
// Rules:
//  - x, z, out: f32 / f16 / bf16, all of x's dtype, shape [..., N] (z and out: x's shape), innermost stride 1, leading
//    dims expressible with one row stride (rows may be further apart than N). M = 0 rows is valid (nothing runs; the
//    device is still checked, as in every op).
//  - weight, bias: [N], stride 1, f32 or x's dtype (both the same dtype), read as f32. weight is required.
//  - group_size: 0 means N (one group per row); otherwise 1 <= G, N % G == 0. G <= 16384 (a group is held in registers).
//  - eps: >= 0, finite in fp32 (where it is used) and not a nonzero value that rounds to 0 there (|eps| <= 7e-46).
//    With eps = 0 a group whose computed variance is exactly 0 (RMSNorm: an all-zero group; LayerNorm: a constant
//    group whose fp32 mean is exact) has rstd = inf and y = NaN (0 * inf), as in FLA: nothing is raised.
//  - mean, rstd: f32, rank 1, [N / G * M], contiguous; mean must be null for RMSNorm (it has no mean).
//  - all tensors on one device (CPU or one CUDA device); the work runs there, on `stream`, without synchronising.
//  - out must not overlap x, z, weight, bias; mean and rstd must not overlap anything.
// Errors: fuseops::Error (invalid_argument) naming the argument for any violation of the above; unsupported for a
// CUDA tensor in a build without CUDA; device_failure if a launch fails.
#pragma once

#include <cstdint>

#include "fuseops/tensor.h"

namespace fuseops {

/// Gated RMSNorm / LayerNorm forward, as FLA `layer_norm_fwd(x, weight, bias, eps, z, out, group_size,
/// norm_before_gate, is_rms_norm)`. out: [..., N] like x. z, bias, mean, rstd: optional (null).
void layer_norm_fwd(TensorView out, const TensorView* mean, const TensorView* rstd, TensorView x, TensorView weight,
                    const TensorView* bias = nullptr, const TensorView* z = nullptr, double eps = 1e-6,
                    int64_t group_size = 0, bool norm_before_gate = true, bool is_rms_norm = false,
                    Stream stream = {});

/// layer_norm_fwd with is_rms_norm = true and no mean: FLA `rmsnorm_fn(x, weight, bias, z, eps, group_size,
/// norm_before_gate)`.
void rms_norm_gated(TensorView out, const TensorView* rstd, TensorView x, TensorView weight,
                    const TensorView* bias = nullptr, const TensorView* z = nullptr, double eps = 1e-6,
                    int64_t group_size = 0, bool norm_before_gate = true, Stream stream = {});

}  // namespace fuseops
