// torch kernels of the GDN intra-chunk ops: convert, guard, current stream, call (include/fuseops/gdn.h).
#include <optional>
#include <string>

#include "fuseops/gdn.h"
#include "fuseops/gdn_forward.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {
namespace {

std::optional<double> opt(c10::optional<double> x) { return x.has_value() ? std::optional<double>(*x) : std::nullopt; }

}  // namespace

void chunk_local_cumsum(at::Tensor& out, const at::Tensor& g, int64_t chunk_size,
                        const c10::optional<at::Tensor>& cu_seqlens, bool reverse, c10::optional<double> scale) {
  constexpr const char* op = "chunk_local_cumsum";
  Written written;
  const TensorView gv = to_view(op, "g", g);
  const OptionalView cu(op, "cu_seqlens", cu_seqlens);
  const TensorView o = written.add(op, "out", out);
  const std::optional<double> sc = scale.has_value() ? std::optional<double>(*scale) : std::nullopt;
  run_on_device_of(out, written,
                   [&](Stream s) { fuseops::chunk_local_cumsum(o, gv, chunk_size, cu.get(), reverse, sc, s); });
}

void chunk_scaled_dot_kkt_fwd(at::Tensor& A, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                              const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                              const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_scaled_dot_kkt_fwd";
  Written written;
  const TensorView kv = to_view(op, "k", k);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), cu(op, "cu_seqlens", cu_seqlens);
  const TensorView a = written.add(op, "A", A);
  run_on_device_of(A, written, [&](Stream s) {
    fuseops::chunk_scaled_dot_kkt_fwd(a, kv, gv.get(), bv.get(), chunk_size, cu.get(), s);
  });
}

void solve_tril(at::Tensor& Ai, const at::Tensor& A, const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "solve_tril";
  Written written;
  const TensorView a = to_view(op, "A", A);
  const OptionalView cu(op, "cu_seqlens", cu_seqlens);
  const TensorView ai = written.add(op, "Ai", Ai);
  run_on_device_of(Ai, written, [&](Stream s) { fuseops::solve_tril(ai, a, cu.get(), s); });
}

void chunk_gated_delta_rule_fwd_kkt_solve(at::Tensor& Ai, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                                          const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                                          const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_gated_delta_rule_fwd_kkt_solve";
  Written written;
  const TensorView kv = to_view(op, "k", k);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), cu(op, "cu_seqlens", cu_seqlens);
  const TensorView ai = written.add(op, "Ai", Ai);
  run_on_device_of(Ai, written, [&](Stream s) {
    fuseops::chunk_gated_delta_rule_fwd_kkt_solve(ai, kv, gv.get(), bv.get(), chunk_size, cu.get(), s);
  });
}

// GDN forward (include/fuseops/gdn_forward.h).

void recompute_w_u_fwd(at::Tensor& w, at::Tensor& u, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                       const at::Tensor& A, const c10::optional<at::Tensor>& g,
                       const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "recompute_w_u_fwd";
  Written written;
  const TensorView wv = written.add(op, "w", w), uv = written.add(op, "u", u), kv = to_view(op, "k", k),
                   vv = to_view(op, "v", v), bv = to_view(op, "beta", beta), av = to_view(op, "A", A);
  const OptionalView gv(op, "g", g), cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(w, written,
                   [&](Stream s) { fuseops::recompute_w_u_fwd(wv, uv, kv, vv, bv, av, gv.get(), cu.get(), s); });
}

void chunk_gated_delta_rule_fwd_h(at::Tensor& h, at::Tensor& v_new, const c10::optional<at::Tensor>& final_state,
                                  const at::Tensor& k, const at::Tensor& w, const at::Tensor& u,
                                  const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& initial_state,
                                  int64_t chunk_size, const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_gated_delta_rule_fwd_h";
  Written written;
  const TensorView hv = written.add(op, "h", h), vn = written.add(op, "v_new", v_new), kv = to_view(op, "k", k),
                   wv = to_view(op, "w", w), uv = to_view(op, "u", u);
  auto ht = written.add(op, "final_state", final_state);
  const OptionalView gv(op, "g", g), h0(op, "initial_state", initial_state), cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(h, written, [&](Stream s) {
    fuseops::chunk_gated_delta_rule_fwd_h(hv, vn, ht.get(), kv, wv, uv, gv.get(), h0.get(), chunk_size, cu.get(), s);
  });
}

void chunk_fwd_o(at::Tensor& o, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v_new, const at::Tensor& h,
                 const c10::optional<at::Tensor>& g, double scale, int64_t chunk_size,
                 const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_fwd_o";
  Written written;
  const TensorView ov = written.add(op, "o", o), qv = to_view(op, "q", q), kv = to_view(op, "k", k),
                   vn = to_view(op, "v_new", v_new), hv = to_view(op, "h", h);
  const OptionalView gv(op, "g", g), cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(o, written, [&](Stream s) {
    fuseops::chunk_fwd_o(ov, qv, kv, vn, hv, gv.get(), scale, chunk_size, cu.get(), s);
  });
}

namespace {

/// chunk_gated_delta_rule, or with `h` (not null) chunk_gated_delta_rule_with_states (`op`). The workspace comes from
/// torch's allocator (stream-ordered, capturable), on o's device, sized for the op called (without the chunk states'
/// region where they go to h); sized inside the error translation, with errors naming the op the user called.
void chunk_forward(const char* op, at::Tensor& o, at::Tensor* h, const c10::optional<at::Tensor>& final_state,
                   const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, c10::optional<double> scale, const c10::optional<at::Tensor>& initial_state,
                   bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens, int64_t chunk_size) {
  Written written;
  const TensorView ov = written.add(op, "o", o);
  const TensorView hv = h ? written.add(op, "h", *h) : TensorView();
  const TensorView qv = to_view(op, "q", q), kv = to_view(op, "k", k), vv = to_view(op, "v", v),
                   gv = to_view(op, "g", g), bv = to_view(op, "beta", beta);
  auto ht = written.add(op, "final_state", final_state);
  const OptionalView h0(op, "initial_state", initial_state), cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(o, written, [&](Stream s) {
    const std::size_t bytes = fuseops::chunk_gated_delta_rule_workspace_size_for(
        op, qv, kv, vv, cu.get(), use_qk_l2norm_in_kernel, chunk_size, /*with_states=*/h != nullptr);
    at::Tensor ws = at::empty({static_cast<int64_t>(bytes / 4 + 1)}, o.options().dtype(at::kFloat));
    const TensorView wsv = to_view(op, "workspace", ws);
    if (h) {
      fuseops::chunk_gated_delta_rule_with_states(ov, hv, ht.get(), qv, kv, vv, gv, bv, opt(scale), h0.get(),
                                                  use_qk_l2norm_in_kernel, cu.get(), wsv, chunk_size, s);
    } else {
      fuseops::chunk_gated_delta_rule(ov, ht.get(), qv, kv, vv, gv, bv, opt(scale), h0.get(), use_qk_l2norm_in_kernel,
                                      cu.get(), wsv, chunk_size, s);
    }
  });
}

}  // namespace

void chunk_gated_delta_rule(at::Tensor& o, const c10::optional<at::Tensor>& final_state, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                            c10::optional<double> scale, const c10::optional<at::Tensor>& initial_state,
                            bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens,
                            int64_t chunk_size) {
  chunk_forward("chunk_gated_delta_rule", o, nullptr, final_state, q, k, v, g, beta, scale, initial_state,
                use_qk_l2norm_in_kernel, cu_seqlens, chunk_size);
}

void chunk_gated_delta_rule_with_states(at::Tensor& o, at::Tensor& h, const c10::optional<at::Tensor>& final_state,
                                        const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& g, const at::Tensor& beta, c10::optional<double> scale,
                                        const c10::optional<at::Tensor>& initial_state, bool use_qk_l2norm_in_kernel,
                                        const c10::optional<at::Tensor>& cu_seqlens, int64_t chunk_size) {
  chunk_forward("chunk_gated_delta_rule_with_states", o, &h, final_state, q, k, v, g, beta, scale, initial_state,
                use_qk_l2norm_in_kernel, cu_seqlens, chunk_size);
}

std::string chunk_gated_delta_rule_intermediate_dtype(at::ScalarType dtype, int64_t head_k_dim, int64_t head_v_dim) {
  constexpr const char* op = "chunk_gated_delta_rule_intermediate_dtype";
  const DType it = translate_errors([&] {
    return fuseops::chunk_gated_delta_rule_intermediate_dtype(to_dtype(op, "dtype", dtype), head_k_dim, head_v_dim);
  });
  return it == DType::f32 ? "float32" : it == DType::f16 ? "float16" : "bfloat16";
}

void fused_recurrent_gated_delta_rule(at::Tensor& o, const c10::optional<at::Tensor>& final_state,
                                      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                      c10::optional<double> scale, const c10::optional<at::Tensor>& initial_state,
                                      bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "fused_recurrent_gated_delta_rule";
  Written written;
  const TensorView ov = written.add(op, "o", o), qv = to_view(op, "q", q), kv = to_view(op, "k", k),
                   vv = to_view(op, "v", v);
  auto ht = written.add(op, "final_state", final_state);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), h0(op, "initial_state", initial_state),
      cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(o, written, [&](Stream s) {
    fuseops::fused_recurrent_gated_delta_rule(ov, ht.get(), qv, kv, vv, gv.get(), bv.get(), opt(scale), h0.get(),
                                              use_qk_l2norm_in_kernel, cu.get(), s);
  });
}

namespace {

/// The serving form with direct gates (the pool updated in place), under vLLM's names (`vllm`: the op
/// fused_recurrent_gated_delta_rule, the pool initial_state) or the C++ API's (fused_recurrent_gated_delta_rule_update,
/// state_pool): each library entry names itself in its errors, the recorded ones included.
void decode_pool(bool vllm, at::Tensor& o, at::Tensor& pool, const at::Tensor& q, const at::Tensor& k,
                 const at::Tensor& v, const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                 c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                 const c10::optional<at::Tensor>& num_accepted_tokens, bool use_qk_l2norm_in_kernel,
                 const c10::optional<at::Tensor>& cu_seqlens) {
  const char* op = vllm ? "fused_recurrent_gated_delta_rule" : "fused_recurrent_gated_delta_rule_update";
  Written written;
  const TensorView ov = written.add(op, "o", o), pv = written.add(op, vllm ? "initial_state" : "state_pool", pool),
                   qv = to_view(op, "q", q), kv = to_view(op, "k", k), vv = to_view(op, "v", v),
                   iv = to_view(op, "ssm_state_indices", ssm_state_indices);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), acc(op, "num_accepted_tokens", num_accepted_tokens),
      cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(o, written, [&](Stream s) {
    if (vllm) {
      fuseops::fused_recurrent_gated_delta_rule(ov, pv, qv, kv, vv, gv.get(), bv.get(), opt(scale), iv, acc.get(),
                                                use_qk_l2norm_in_kernel, cu.get(), s);
    } else {
      fuseops::fused_recurrent_gated_delta_rule_update(ov, pv, qv, kv, vv, gv.get(), bv.get(), opt(scale), iv,
                                                       acc.get(), use_qk_l2norm_in_kernel, cu.get(), s);
    }
  });
}

}  // namespace

void fused_recurrent_gated_delta_rule_update(at::Tensor& o, at::Tensor& state_pool, const at::Tensor& q,
                                             const at::Tensor& k, const at::Tensor& v,
                                             const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                             c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                                             const c10::optional<at::Tensor>& num_accepted_tokens,
                                             bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens) {
  decode_pool(false, o, state_pool, q, k, v, g, beta, scale, ssm_state_indices, num_accepted_tokens,
              use_qk_l2norm_in_kernel, cu_seqlens);
}

void fused_recurrent_gated_delta_rule_pool(at::Tensor& o, at::Tensor& initial_state, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const c10::optional<at::Tensor>& g, const c10::optional<at::Tensor>& beta,
                                           c10::optional<double> scale, const at::Tensor& ssm_state_indices,
                                           const c10::optional<at::Tensor>& num_accepted_tokens,
                                           bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens) {
  decode_pool(true, o, initial_state, q, k, v, g, beta, scale, ssm_state_indices, num_accepted_tokens,
              use_qk_l2norm_in_kernel, cu_seqlens);
}

void fused_sigmoid_gating_delta_rule_update(at::Tensor& o, at::Tensor& initial_state_source,
                                            const at::Tensor& A_log, const at::Tensor& a, const at::Tensor& dt_bias,
                                            const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& b, c10::optional<double> scale,
                                            const at::Tensor& initial_state_indices,
                                            const c10::optional<at::Tensor>& num_accepted_tokens,
                                            bool use_qk_l2norm_in_kernel, const c10::optional<at::Tensor>& cu_seqlens,
                                            double softplus_beta, double softplus_threshold) {
  constexpr const char* op = "fused_sigmoid_gating_delta_rule_update";
  Written written;
  const TensorView ov = written.add(op, "o", o),
                   pv = written.add(op, "initial_state_source", initial_state_source),
                   al = to_view(op, "A_log", A_log), av = to_view(op, "a", a), db = to_view(op, "dt_bias", dt_bias),
                   qv = to_view(op, "q", q), kv = to_view(op, "k", k), vv = to_view(op, "v", v),
                   bv = to_view(op, "b", b), iv = to_view(op, "initial_state_indices", initial_state_indices);
  const OptionalView acc(op, "num_accepted_tokens", num_accepted_tokens), cu(op, "cu_seqlens", cu_seqlens);
  run_on_device_of(o, written, [&](Stream s) {
    fuseops::fused_sigmoid_gating_delta_rule_update(ov, pv, al, av, db, qv, kv, vv, bv, opt(scale), iv, acc.get(),
                                                    use_qk_l2norm_in_kernel, cu.get(), softplus_beta,
                                                    softplus_threshold, s);
  });
}

}  // namespace fuseops::torch_binding
