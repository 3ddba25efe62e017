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

// MoE routing (include/fuseops/moe.h, docs/ops/moe.md).
void topk_softmax(at::Tensor& topk_weights, at::Tensor& topk_ids, at::Tensor& token_expert_indices,
                  const at::Tensor& gating_output, bool renormalize, const c10::optional<at::Tensor>& correction_bias);
void grouped_topk(at::Tensor& topk_weights, at::Tensor& topk_ids, const at::Tensor& scores,
                  const c10::optional<at::Tensor>& bias, int64_t n_group, int64_t topk_group, bool renormalize,
                  double routed_scaling_factor, c10::string_view scoring);
void moe_align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_size,
                          at::Tensor& sorted_token_ids, at::Tensor& expert_ids, at::Tensor& num_tokens_post_pad,
                          const c10::optional<at::Tensor>& expert_map);
void moe_route(at::Tensor& topk_weights, at::Tensor& topk_ids, at::Tensor& sorted_token_ids, at::Tensor& expert_ids,
               at::Tensor& num_tokens_post_pad, const at::Tensor& gating_output, const c10::optional<at::Tensor>& bias,
               c10::string_view scoring, int64_t n_group, int64_t topk_group, bool renormalize,
               double routed_scaling_factor, int64_t block_size);
// Rotary embeddings (include/fuseops/rope.h, docs/ops/rope.md). The *_backward ops are these with inverse = true,
// under their own names (errors, deferred ones included).
void rotary_embedding(const at::Tensor& positions, at::Tensor& query, const c10::optional<at::Tensor>& key,
                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox, bool inverse);
void rotary_embedding_backward(const at::Tensor& positions, at::Tensor& grad_query,
                               const c10::optional<at::Tensor>& grad_key, int64_t head_size,
                               const at::Tensor& cos_sin_cache, bool is_neox);
void apply_rotary_pos_emb(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& cos, const at::Tensor& sin, const c10::optional<at::Tensor>& position_ids,
                          bool rotary_interleaved, bool inverse);
void apply_rotary_pos_emb_inplace(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                                  const c10::optional<at::Tensor>& position_ids, bool rotary_interleaved, bool inverse);
/// The names apply_rotary_pos_emb(_inplace)'s errors use: the op, under its backward's name with inverse; an argument
/// of the schema (q, k, q_out, k_out, cos, ...), the gradients' grad_ names with inverse for q / k / q_out / k_out.
const char* apply_rotary_error_op(bool inverse);
std::string apply_rotary_error_arg(bool inverse, const std::string& name);
void mrope(const at::Tensor& positions, at::Tensor& query, const c10::optional<at::Tensor>& key, int64_t head_size,
           int64_t rotary_dim, const at::Tensor& cos_sin_cache, at::IntArrayRef mrope_section, bool is_neox,
           c10::string_view layout, bool inverse);
void mrope_backward(const at::Tensor& positions, at::Tensor& grad_query, const c10::optional<at::Tensor>& grad_key,
                    int64_t head_size, int64_t rotary_dim, const at::Tensor& cos_sin_cache,
                    at::IntArrayRef mrope_section, bool is_neox, c10::string_view layout);
// Gated norm (include/fuseops/norm.h, docs/ops/norm.md).
void layer_norm_fwd(at::Tensor& out, const c10::optional<at::Tensor>& mean, const c10::optional<at::Tensor>& rstd,
                    const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                    const c10::optional<at::Tensor>& z, double eps, int64_t group_size, bool norm_before_gate,
                    bool is_rms_norm);

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
void chunk_gated_delta_rule_with_states(at::Tensor& o, at::Tensor& h, const c10::optional<at::Tensor>& final_state,
                                        const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& g, const at::Tensor& beta, c10::optional<double> scale,
                                        const c10::optional<at::Tensor>& initial_state, bool use_qk_l2norm_in_kernel,
                                        const c10::optional<at::Tensor>& cu_seqlens, int64_t chunk_size);
/// The dtype's name in torch (float32, float16, bfloat16). No tensor arguments: registered for no backend
/// (CompositeExplicitAutograd), as check_errors.
std::string chunk_gated_delta_rule_intermediate_dtype(at::ScalarType dtype, int64_t head_k_dim, int64_t head_v_dim);
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
/// The overload fused_recurrent_gated_delta_rule.pool: the serving form under vLLM's names (the pool initial_state).
void fused_recurrent_gated_delta_rule_pool(at::Tensor& o, at::Tensor& initial_state, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                           c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                                           const c10::optional<at::Tensor>& num_accepted_tokens,
                                           bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens);
void fused_sigmoid_gating_delta_rule_update(at::Tensor& o, at::Tensor& initial_state_source,
                                            const at::Tensor& A_log, const at::Tensor& a, const at::Tensor& dt_bias,
                                            const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& b, c10::optional<double> scale,
                                            const at::Tensor& initial_state_indices,
                                            const c10::optional<at::Tensor>& num_accepted_tokens,
                                            bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens,
                                            double softplus_beta, double softplus_threshold);

}  // namespace fuseops::torch_binding
