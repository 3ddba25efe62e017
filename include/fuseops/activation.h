// fuseops public API: gated activations (SwiGLU / GeGLU) and their backward.
//
// Semantics follow vLLM `silu_and_mul` / `gelu_and_mul` / `gelu_tanh_and_mul` (csrc/activation_kernels.cu) and
// FlashInfer `silu_and_mul` (flashinfer/activation.py): the FIRST half of the last dim is the gate (activated),
// the second half is "up". The two-tensor forms follow FlagGems `silu_and_mul(A, B)` / `gelu_and_mul(x, y,
// approximate)`. The backward follows FlagGems / Liger (see docs/ops/activation.md).
//
// Numerics: the activation and the product are computed in fp32 and rounded once, at the store (FlashInfer's
// and FlagGems' convention). PyTorch eager and vLLM round twice (activation, then product) and may differ by
// 1 ulp of the output dtype.
//
// Common rules for every function here:
//  - dtypes: f32, f16 or bf16; all tensors of one call have the same dtype.
//  - shapes: [..., d] with any number of leading dims (rank >= 1); leading dims are flattened into rows and
//    must be expressible with a single row stride. d >= 1 for the fused [..., 2*d] input (its last dim even and
//    >= 2); the two-tensor forms also take d = 0 (nothing to do). Zero rows is valid (nothing is launched;
//    the device is still checked: a CUDA tensor without a CUDA build or device is `unsupported`).
//  - strides: the innermost stride of every tensor must be 1; rows may be further apart than their width
//    (a view into a wider fused buffer).
//  - device: all tensors on the same device (CPU or one CUDA device); the work runs there, on `stream`.
//  - outputs must not overlap any input or each other.
// Errors: fuseops::Error (kind invalid_argument) naming the argument for any violation of the above;
// kind unsupported when a CUDA tensor is passed to a build without CUDA; kind device_failure if a launch fails.
#pragma once

#include "fuseops/tensor.h"

namespace fuseops {

/// GELU variant: exact erf form, or the tanh approximation (PyTorch `approximate="none" | "tanh"`).
enum class GeluApproximate : int { none = 0, tanh = 1 };

/// Parses "none" / "tanh"; throws Error naming `approximate` otherwise.
GeluApproximate parse_gelu_approximate(const std::string& approximate);

/// out[..., i] = silu(input[..., i]) * input[..., d + i], silu(x) = x / (1 + exp(-x)).
/// out: [..., d]; input: [..., 2*d], same leading dims. As vLLM / FlashInfer `silu_and_mul`.
void silu_and_mul(TensorView out, TensorView input, Stream stream = {});

/// out[..., i] = gelu(input[..., i]) * input[..., d + i]; gelu is 0.5*x*(1+erf(x/sqrt(2))) (none) or
/// 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) (tanh). As vLLM `gelu_and_mul` / `gelu_tanh_and_mul`.
void gelu_and_mul(TensorView out, TensorView input, GeluApproximate approximate = GeluApproximate::none,
                  Stream stream = {});

/// gelu_and_mul with approximate = tanh (vLLM / FlashInfer `gelu_tanh_and_mul`).
void gelu_tanh_and_mul(TensorView out, TensorView input, Stream stream = {});

/// out = silu(gate) * up; out, gate, up: [..., d]. As FlagGems `silu_and_mul(A, B)`.
void silu_and_mul_split(TensorView out, TensorView gate, TensorView up, Stream stream = {});

/// out = gelu(gate) * up; out, gate, up: [..., d]. As FlagGems `gelu_and_mul(x, y, approximate)`.
void gelu_and_mul_split(TensorView out, TensorView gate, TensorView up,
                        GeluApproximate approximate = GeluApproximate::none, Stream stream = {});

/// Backward of out = silu(gate) * up: dgate = dout * up * silu'(gate), dup = dout * silu(gate).
/// dgate, dup, dout, gate, up: [..., d]. dgate and dup must not overlap dout, gate or up (unlike Liger, which
/// overwrites the saved activations). As FlagGems / Liger SwiGLU backward.
void silu_and_mul_backward(TensorView dgate, TensorView dup, TensorView dout, TensorView gate, TensorView up,
                           Stream stream = {});

/// Backward of out = gelu(gate) * up (none: FlagGems' erf form; tanh: Liger / FlagGems' tanh form).
void gelu_and_mul_backward(TensorView dgate, TensorView dup, TensorView dout, TensorView gate, TensorView up,
                           GeluApproximate approximate = GeluApproximate::none, Stream stream = {});

/// The largest expert count E of the masked forms (the CUDA kernel keeps a prefix sum of masked_m in shared memory).
inline constexpr int64_t kMaxMaskedExperts = 4096;

/// Masked expert-major form of silu_and_mul (MoE expert outputs in the DeepEP low-latency / DeepGEMM masked layout,
/// as SGLang's `silu_and_mul_masked_post_quant_fwd` and vLLM's `masked_moe_activation` without the quantisation):
///   out[e, r, i] = silu(input[e, r, i]) * input[e, r, d + i]    for r < n_e = min(masked_m[e], T_max), 0 <= i < d
/// Rows r >= n_e of `out` are neither read nor written (they keep whatever they held); rows r >= n_e of `input` are
/// never read. input: [E, T_max, 2*d]; out: [E, T_max, d] (same dtype; innermost stride 1, any non-negative expert
/// and row strides that keep out's elements apart by the sufficient rule of docs/ops/activation.md, else an error
/// naming out: e.g. a row stride below d with T_max > 1, or expert stride 0 with E > 1); masked_m:
/// [E] int32 or int64 on the same device (any non-negative stride), E <= kMaxMaskedExperts (4096). The work is
/// spread over the valid rows only (a few busy experts still fill the GPU) and masked_m is read on the device without
/// synchronising: masked_m[e] > T_max is treated as T_max and masked_m[e] < 0 as 0, and either records the first such
/// e in the device error record (check_errors()). out must not overlap input or masked_m. Same numerics as
/// silu_and_mul.
void silu_and_mul_masked(TensorView out, TensorView input, TensorView masked_m, Stream stream = {});

/// gelu_and_mul (none / tanh) in the masked expert-major form of silu_and_mul_masked.
void gelu_and_mul_masked(TensorView out, TensorView input, TensorView masked_m,
                         GeluApproximate approximate = GeluApproximate::none, Stream stream = {});

}  // namespace fuseops
