// The one schema file of torch.ops.fuseops (style.md rule 3): every op's schema, with exact alias annotations
// (`Tensor!` for a tensor the op writes, `Tensor?` for an optional input), then its kernels. Ops that write their
// outputs return (); their fakes (python/fuseops/_fake.py) are no-ops.
//
// Adding an op: its schema below, its kernel in <family>.cpp (declared in ops.h), one line in register_kernels(),
// its name in python/fuseops/_fake.py, a Python wrapper, tests in tests/python/.
#include "ops.h"

TORCH_LIBRARY(fuseops, m) {
  // Gated activations: docs/ops/activation.md.
  m.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  m.def("gelu_and_mul(Tensor! out, Tensor input, str approximate=\"none\") -> ()");
  m.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
  m.def("silu_and_mul_split(Tensor! out, Tensor gate, Tensor up) -> ()");
  m.def("gelu_and_mul_split(Tensor! out, Tensor gate, Tensor up, str approximate=\"none\") -> ()");
  // Functional overloads: allocate the output inside the one dispatcher call (what the Python API calls when no
  // `out` is given; allocating in Python costs more host time than the op itself at decode sizes).
  m.def("silu_and_mul.functional(Tensor input) -> Tensor");
  m.def("gelu_and_mul.functional(Tensor input, str approximate=\"none\") -> Tensor");
  m.def("gelu_tanh_and_mul.functional(Tensor input) -> Tensor");
  m.def("silu_and_mul_split.functional(Tensor gate, Tensor up) -> Tensor");
  m.def("gelu_and_mul_split.functional(Tensor gate, Tensor up, str approximate=\"none\") -> Tensor");
  m.def("silu_and_mul_backward(Tensor! dgate, Tensor! dup, Tensor dout, Tensor gate, Tensor up) -> ()");
  m.def("gelu_and_mul_backward(Tensor! dgate, Tensor! dup, Tensor dout, Tensor gate, Tensor up, "
        "str approximate=\"none\") -> ()");

  // Masked expert-major activations (rows r < masked_m[e] only): docs/ops/activation.md.
  m.def("silu_and_mul_masked(Tensor! out, Tensor input, Tensor masked_m) -> ()");
  m.def("gelu_and_mul_masked(Tensor! out, Tensor input, Tensor masked_m, str approximate=\"none\") -> ()");

  // GDN intra-chunk stage: docs/ops/gdn.md.
  m.def("chunk_local_cumsum(Tensor! out, Tensor g, int chunk_size, Tensor? cu_seqlens=None, bool reverse=False, "
        "float? scale=None) -> ()");
  m.def("chunk_scaled_dot_kkt_fwd(Tensor! A, Tensor k, Tensor? g, Tensor? beta, int chunk_size, "
        "Tensor? cu_seqlens=None) -> ()");
  m.def("solve_tril(Tensor! Ai, Tensor A, Tensor? cu_seqlens=None) -> ()");
  m.def("chunk_gated_delta_rule_fwd_kkt_solve(Tensor! Ai, Tensor k, Tensor? g, Tensor? beta, int chunk_size=64, "
        "Tensor? cu_seqlens=None) -> ()");

  // Rotary embeddings: docs/ops/rope.md. In place on query / key (vLLM); apply_rotary_pos_emb writes q_out / k_out
  // (FlagGems' inplace=False) or, as apply_rotary_pos_emb_inplace, q and k. inverse=True is the backward.
  m.def("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "
        "bool is_neox, bool inverse=False) -> ()");
  m.def("apply_rotary_pos_emb(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos, Tensor sin, "
        "Tensor? position_ids=None, bool rotary_interleaved=False, bool inverse=False) -> ()");
  m.def("apply_rotary_pos_emb_inplace(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, Tensor? position_ids=None, "
        "bool rotary_interleaved=False, bool inverse=False) -> ()");
  m.def("mrope(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, int rotary_dim, "
        "Tensor cos_sin_cache, int[] mrope_section, bool is_neox=True, str layout=\"chunked\", "
        "bool inverse=False) -> ()");
  // The backward of the vLLM forms: the forms with inverse=True, under their own names (errors, deferred ones included).
  m.def("rotary_embedding_backward(Tensor positions, Tensor(a!) grad_query, Tensor(b!)? grad_key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()");
  m.def("mrope_backward(Tensor positions, Tensor(a!) grad_query, Tensor(b!)? grad_key, int head_size, "
        "int rotary_dim, Tensor cos_sin_cache, int[] mrope_section, bool is_neox=True, str layout=\"chunked\") -> ()");
  // GDN forward: prefill stages, the chunked op, decode (docs/ops/gdn.md).
  m.def("recompute_w_u_fwd(Tensor! w, Tensor! u, Tensor k, Tensor v, Tensor beta, Tensor A, Tensor? g=None, "
        "Tensor? cu_seqlens=None) -> ()");
  m.def("chunk_gated_delta_rule_fwd_h(Tensor! h, Tensor! v_new, Tensor(a!)? final_state, Tensor k, Tensor w, "
        "Tensor u, Tensor? g=None, Tensor? initial_state=None, int chunk_size=64, Tensor? cu_seqlens=None) -> ()");
  m.def("chunk_fwd_o(Tensor! o, Tensor q, Tensor k, Tensor v_new, Tensor h, Tensor? g, float scale, "
        "int chunk_size=64, Tensor? cu_seqlens=None) -> ()");
  m.def("chunk_gated_delta_rule(Tensor! o, Tensor(a!)? final_state, Tensor q, Tensor k, Tensor v, Tensor g, "
        "Tensor beta, float? scale=None, Tensor? initial_state=None, bool use_qk_l2norm_in_kernel=False, "
        "Tensor? cu_seqlens=None, int chunk_size=64) -> ()");
  m.def("chunk_gated_delta_rule_with_states(Tensor! o, Tensor! h, Tensor(a!)? final_state, Tensor q, Tensor k, "
        "Tensor v, Tensor g, Tensor beta, float? scale=None, Tensor? initial_state=None, "
        "bool use_qk_l2norm_in_kernel=False, Tensor? cu_seqlens=None, int chunk_size=64) -> ()");
  // The dtype's name in torch ("float32", "float16", "bfloat16"): a ScalarType result reaches Python as a bare int on
  // some torch versions (1.13).
  m.def("chunk_gated_delta_rule_intermediate_dtype(ScalarType dtype, int head_k_dim, int head_v_dim) -> str");
  m.def("fused_recurrent_gated_delta_rule(Tensor! o, Tensor(a!)? final_state, Tensor q, Tensor k, Tensor v, "
        "Tensor? g=None, Tensor? beta=None, float? scale=None, Tensor? initial_state=None, "
        "bool use_qk_l2norm_in_kernel=False, Tensor? cu_seqlens=None) -> ()");
  m.def("fused_recurrent_gated_delta_rule_update(Tensor! o, Tensor! state_pool, Tensor q, Tensor k, Tensor v, "
        "Tensor? g, Tensor? beta, float? scale, Tensor ssm_state_indices, Tensor? num_accepted_tokens=None, "
        "bool use_qk_l2norm_in_kernel=False, Tensor? cu_seqlens=None) -> ()");
  // the serving form under vLLM's name: its errors, the recorded ones included, name fused_recurrent_gated_delta_rule
  m.def("fused_recurrent_gated_delta_rule.pool(Tensor! o, Tensor! initial_state, Tensor q, Tensor k, Tensor v, "
        "Tensor? g, Tensor? beta, float? scale, Tensor ssm_state_indices, Tensor? num_accepted_tokens=None, "
        "bool use_qk_l2norm_in_kernel=False, Tensor? cu_seqlens=None) -> ()");
  m.def("fused_sigmoid_gating_delta_rule_update(Tensor! o, Tensor! initial_state_source, Tensor A_log, Tensor a, "
        "Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor b, float? scale, Tensor initial_state_indices, "
        "Tensor? num_accepted_tokens=None, bool use_qk_l2norm_in_kernel=False, Tensor? cu_seqlens=None, "
        "float softplus_beta=1.0, float softplus_threshold=20.0) -> ()");
  // Gated norm: docs/ops/norm.md.
  m.def("layer_norm_fwd(Tensor(a!) out, Tensor(b!)? mean, Tensor(c!)? rstd, Tensor x, Tensor weight, "
        "Tensor? bias=None, Tensor? z=None, float eps=1e-6, int group_size=0, bool norm_before_gate=True, "
        "bool is_rms_norm=False) -> ()");

  // Library-wide: the device error record (include/fuseops/error.h) and the version.
  // MoE routing: docs/ops/moe.md.
  m.def("topk_softmax(Tensor! topk_weights, Tensor! topk_ids, Tensor! token_expert_indices, Tensor gating_output, "
        "bool renormalize=False, Tensor? correction_bias=None) -> ()");
  m.def("grouped_topk(Tensor! topk_weights, Tensor! topk_ids, Tensor scores, Tensor? bias, int n_group, "
        "int topk_group, bool renormalize, float routed_scaling_factor, str scoring=\"sigmoid\") -> ()");
  m.def("moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor! sorted_token_ids, "
        "Tensor! expert_ids, Tensor! num_tokens_post_pad, Tensor? expert_map=None) -> ()");
  m.def("moe_route(Tensor! topk_weights, Tensor! topk_ids, Tensor! sorted_token_ids, Tensor! expert_ids, "
        "Tensor! num_tokens_post_pad, Tensor gating_output, Tensor? bias, str scoring, int n_group, int topk_group, "
        "bool renormalize, float routed_scaling_factor, int block_size) -> ()");
  m.def("check_errors(int device=-1) -> ()");
  m.def("clear_errors(int device=-1) -> ()");
  m.def("version() -> str");
}

namespace {

/// The kernels of every tensor op; the same functions serve CPU and CUDA tensors (the library dispatches by device).
void register_kernels(torch::Library& m) {
  using namespace fuseops::torch_binding;
  m.impl("topk_softmax", TORCH_FN(topk_softmax));
  m.impl("grouped_topk", TORCH_FN(grouped_topk));
  m.impl("moe_align_block_size", TORCH_FN(moe_align_block_size));
  m.impl("moe_route", TORCH_FN(moe_route));
  m.impl("silu_and_mul", TORCH_FN(silu_and_mul));
  m.impl("gelu_and_mul", TORCH_FN(gelu_and_mul));
  m.impl("gelu_tanh_and_mul", TORCH_FN(gelu_tanh_and_mul));
  m.impl("silu_and_mul_split", TORCH_FN(silu_and_mul_split));
  m.impl("gelu_and_mul_split", TORCH_FN(gelu_and_mul_split));
  m.impl("silu_and_mul_backward", TORCH_FN(silu_and_mul_backward));
  m.impl("gelu_and_mul_backward", TORCH_FN(gelu_and_mul_backward));
  m.impl("silu_and_mul.functional", TORCH_FN(silu_and_mul_functional));
  m.impl("gelu_and_mul.functional", TORCH_FN(gelu_and_mul_functional));
  m.impl("gelu_tanh_and_mul.functional", TORCH_FN(gelu_tanh_and_mul_functional));
  m.impl("silu_and_mul_split.functional", TORCH_FN(silu_and_mul_split_functional));
  m.impl("gelu_and_mul_split.functional", TORCH_FN(gelu_and_mul_split_functional));
  m.impl("silu_and_mul_masked", TORCH_FN(silu_and_mul_masked));
  m.impl("gelu_and_mul_masked", TORCH_FN(gelu_and_mul_masked));
  m.impl("layer_norm_fwd", TORCH_FN(layer_norm_fwd));
  m.impl("chunk_local_cumsum", TORCH_FN(chunk_local_cumsum));
  m.impl("chunk_scaled_dot_kkt_fwd", TORCH_FN(chunk_scaled_dot_kkt_fwd));
  m.impl("solve_tril", TORCH_FN(solve_tril));
  m.impl("chunk_gated_delta_rule_fwd_kkt_solve", TORCH_FN(chunk_gated_delta_rule_fwd_kkt_solve));
  m.impl("rotary_embedding", TORCH_FN(rotary_embedding));
  m.impl("apply_rotary_pos_emb", TORCH_FN(apply_rotary_pos_emb));
  m.impl("apply_rotary_pos_emb_inplace", TORCH_FN(apply_rotary_pos_emb_inplace));
  m.impl("mrope", TORCH_FN(mrope));
  m.impl("rotary_embedding_backward", TORCH_FN(rotary_embedding_backward));
  m.impl("mrope_backward", TORCH_FN(mrope_backward));
  m.impl("recompute_w_u_fwd", TORCH_FN(recompute_w_u_fwd));
  m.impl("chunk_gated_delta_rule_fwd_h", TORCH_FN(chunk_gated_delta_rule_fwd_h));
  m.impl("chunk_fwd_o", TORCH_FN(chunk_fwd_o));
  m.impl("chunk_gated_delta_rule", TORCH_FN(chunk_gated_delta_rule));
  m.impl("chunk_gated_delta_rule_with_states", TORCH_FN(chunk_gated_delta_rule_with_states));
  m.impl("fused_recurrent_gated_delta_rule", TORCH_FN(fused_recurrent_gated_delta_rule));
  m.impl("fused_recurrent_gated_delta_rule_update", TORCH_FN(fused_recurrent_gated_delta_rule_update));
  m.impl("fused_recurrent_gated_delta_rule.pool", TORCH_FN(fused_recurrent_gated_delta_rule_pool));
  m.impl("fused_sigmoid_gating_delta_rule_update", TORCH_FN(fused_sigmoid_gating_delta_rule_update));
}

}  // namespace

TORCH_LIBRARY_IMPL(fuseops, CPU, m) { register_kernels(m); }

#ifdef FUSEOPS_TORCH_CUDA  // set by bindings/torch/CMakeLists.txt when torch has CUDA and FUSEOPS_WITH_CUDA is on
TORCH_LIBRARY_IMPL(fuseops, CUDA, m) { register_kernels(m); }
#endif

namespace {

/// Tensors carrying torch's negative or conjugate bit (torch._neg_view, .conj() of a real view, .imag of a conjugate).
/// torch's fallback for those bits runs an op on materialised copies and, for each argument the op writes, expects the
/// op to return it; these ops return () (or a new tensor), and the fallback failed on an internal assert after the op
/// had run, with the writes to the other arguments done. So: an argument the op writes is refused by name, before
/// anything runs; a read-only one is materialised (as the fallback does) and the op runs.
void resolve_math_bits(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  using namespace fuseops::torch_binding;
  const auto& args = op.schema().arguments();
  const std::size_t n = args.size();
  const std::string& full = op.schema().name();
  std::string name = full.substr(full.find("::") + 2);
  // the names the op's other errors use: apply_rotary_pos_emb(_inplace) names itself as its binding does
  const bool rope = name == "apply_rotary_pos_emb" || name == "apply_rotary_pos_emb_inplace";
  bool inverse = false;
  for (std::size_t i = 0; rope && i < n; ++i) {
    const c10::IValue& v = (*stack)[stack->size() - n + i];
    if (args[i].name() == "inverse" && v.isBool()) inverse = v.toBool();
  }
  if (rope) name = apply_rotary_error_op(inverse);
  for (std::size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (!v.isTensor()) continue;  // None of an optional tensor too
    const at::Tensor t = v.toTensor();
    if (!t.is_neg() && !t.is_conj()) continue;
    const char* bit = t.is_conj() ? "conjugate" : "negative";
    const auto* alias = args[i].alias_info();
    const std::string arg = rope ? apply_rotary_error_arg(inverse, args[i].name()) : args[i].name();
    TORCH_CHECK_VALUE(!(alias && alias->isWrite()), name, ": ", arg, ": expected a tensor without torch's ", bit,
                      " bit (the op writes it in place), got one with it (resolve it first: .resolve_",
                      t.is_conj() ? "conj" : "neg", "())");
    v = t.resolve_conj().resolve_neg();
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Negative) &
                         c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Conjugate),
                     stack);
}

/// resolve_math_bits for every fuseops op that writes a tensor argument (`Tensor!` in its schema); ops that only read
/// keep torch's fallback, which materialises their inputs.
void register_math_bits(torch::Library& m) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& op : dispatcher.getAllOpNames()) {
    if (op.name.rfind("fuseops::", 0) != 0) continue;
    const auto handle = dispatcher.findSchema(op);
    if (!handle || !handle->hasSchema()) continue;
    bool writes = false;
    for (const auto& a : handle->schema().arguments()) writes = writes || (a.alias_info() && a.alias_info()->isWrite());
    if (!writes) continue;
    const std::string name = op.name.substr(9) + (op.overload_name.empty() ? "" : "." + op.overload_name);
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&resolve_math_bits>());
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(fuseops, Negative, m) { register_math_bits(m); }
TORCH_LIBRARY_IMPL(fuseops, Conjugate, m) { register_math_bits(m); }

// No tensor arguments, so no backend to dispatch on.
TORCH_LIBRARY_IMPL(fuseops, CompositeExplicitAutograd, m) {
  using namespace fuseops::torch_binding;
  m.impl("check_errors", TORCH_FN(check_errors));
  m.impl("clear_errors", TORCH_FN(clear_errors));
  m.impl("version", TORCH_FN(version));
  m.impl("chunk_gated_delta_rule_intermediate_dtype", TORCH_FN(chunk_gated_delta_rule_intermediate_dtype));
}
