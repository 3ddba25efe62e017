// Kernels of the torch binding, one function per schema in registration.cpp. Each converts its tensors with
// torch_utils.h and calls the C++ API; argument names match the schema's (they are named in error messages).
#pragma once

#include <torch/all.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fuseops::torch_binding {

// Gated activations (include/fuseops/activation.h, docs/ops/activation.md).
void silu_and_mul(at::Tensor& out, const at::Tensor& input);
void gelu_and_mul(at::Tensor& out, const at::Tensor& input, c10::string_view approximate);
void gelu_tanh_and_mul(at::Tensor& out, const at::Tensor& input);
void silu_and_mul_split(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up);
void gelu_and_mul_split(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up, c10::string_view approximate);
void silu_and_mul_backward(at::Tensor& dgate, at::Tensor& dup, const at::Tensor& dout, const at::Tensor& gate,
                           const at::Tensor& up);
void gelu_and_mul_backward(at::Tensor& dgate, at::Tensor& dup, const at::Tensor& dout, const at::Tensor& gate,
                           const at::Tensor& up, c10::string_view approximate);

void silu_and_mul_masked(at::Tensor& out, const at::Tensor& input, const at::Tensor& masked_m);
void gelu_and_mul_masked(at::Tensor& out, const at::Tensor& input, const at::Tensor& masked_m,
                         c10::string_view approximate);

// Functional overloads: allocate the output, then call the function above.
at::Tensor silu_and_mul_functional(const at::Tensor& input);
at::Tensor gelu_and_mul_functional(const at::Tensor& input, c10::string_view approximate);
at::Tensor gelu_tanh_and_mul_functional(const at::Tensor& input);
at::Tensor silu_and_mul_split_functional(const at::Tensor& gate, const at::Tensor& up);
at::Tensor gelu_and_mul_split_functional(const at::Tensor& gate, const at::Tensor& up, c10::string_view approximate);

// GDN intra-chunk stage (include/fuseops/gdn.h, docs/ops/gdn.md).
void chunk_local_cumsum(at::Tensor& out, const at::Tensor& g, int64_t chunk_size,
                        const c10::optional<at::Tensor>& cu_seqlens, bool reverse, c10::optional<double> scale);
void chunk_scaled_dot_kkt_fwd(at::Tensor& A, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                              const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                              const c10::optional<at::Tensor>& cu_seqlens);
void solve_tril(at::Tensor& Ai, const at::Tensor& A, const c10::optional<at::Tensor>& cu_seqlens);
void chunk_gated_delta_rule_fwd_kkt_solve(at::Tensor& Ai, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                                          const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                                          const c10::optional<at::Tensor>& cu_seqlens);

// Gated norm (include/fuseops/norm.h, docs/ops/norm.md).
void layer_norm_fwd(at::Tensor& out, const c10::optional<at::Tensor>& mean, const c10::optional<at::Tensor>& rstd,
                    const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                    const c10::optional<at::Tensor>& z, double eps, int64_t group_size, bool norm_before_gate,
                    bool is_rms_norm);

// Library-wide (include/fuseops/error.h, version.h).
void check_errors(int64_t device);
void clear_errors(int64_t device);
std::string version();

}  // namespace fuseops::torch_binding
