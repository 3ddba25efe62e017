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

// Library-wide (include/fuseops/error.h, version.h).
void check_errors(int64_t device);
void clear_errors(int64_t device);
std::string version();

// GDN forward (include/fuseops/gdn_forward.h, docs/ops/gdn.md).
void recompute_w_u_fwd(at::Tensor& w, at::Tensor& u, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                       const at::Tensor& A, const c10::optional<at::Tensor>& g,
                       const c10::optional<at::Tensor>& cu_seqlens);
void chunk_gated_delta_rule_fwd_h(at::Tensor& h, at::Tensor& v_new, const c10::optional<at::Tensor>& final_state,
                                  const at::Tensor& k, const at::Tensor& w, const at::Tensor& u,
                                  const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& initial_state,
                                  int64_t chunk_size, const c10::optional<at::Tensor>& cu_seqlens);
void chunk_fwd_o(at::Tensor& o, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v_new, const at::Tensor& h,
                 const c10::optional<at::Tensor>& g, double scale, int64_t chunk_size,
                 const c10::optional<at::Tensor>& cu_seqlens);
void chunk_gated_delta_rule(at::Tensor& o, const c10::optional<at::Tensor>& final_state, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                            c10::optional<double> scale, const c10::optional<at::Tensor>& initial_state,
                            bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens,
                            int64_t chunk_size);
void fused_recurrent_gated_delta_rule(at::Tensor& o, const c10::optional<at::Tensor>& final_state,
                                      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                      c10::optional<double> scale, const c10::optional<at::Tensor>& initial_state,
                                      bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens);
void fused_recurrent_gated_delta_rule_update(at::Tensor& o, at::Tensor& state_pool, const at::Tensor& q,
                                             const at::Tensor& k, const at::Tensor& v,
                                             const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                             c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                                             const c10::optional<at::Tensor>& num_accepted_tokens,
                                             bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens);
void fused_sigmoid_gating_delta_rule_update(at::Tensor& o, at::Tensor& state_pool, const at::Tensor& A_log,
                                            const at::Tensor& a, const at::Tensor& dt_bias, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& b,
                                            c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                                            const c10::optional<at::Tensor>& num_accepted_tokens,
                                            bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens,
                                            double softplus_beta, double softplus_threshold);

}  // namespace fuseops::torch_binding
