// torch kernels of the GDN intra-chunk ops: convert, guard, current stream, call (include/fuseops/gdn.h).
#include <optional>

#include "fuseops/gdn.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {
void chunk_local_cumsum(at::Tensor& out, const at::Tensor& g, int64_t chunk_size,
                        const c10::optional<at::Tensor>& cu_seqlens, bool reverse, c10::optional<double> scale) {
  constexpr const char* op = "chunk_local_cumsum";
  const TensorView gv = to_view(op, "g", g);
  const OptionalView cu(op, "cu_seqlens", cu_seqlens);
  const TensorView o = to_view(op, "out", out);
  const std::optional<double> sc = scale.has_value() ? std::optional<double>(*scale) : std::nullopt;
  run_on_device_of(out, [&](Stream s) { fuseops::chunk_local_cumsum(o, gv, chunk_size, cu.get(), reverse, sc, s); });
}

void chunk_scaled_dot_kkt_fwd(at::Tensor& A, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                              const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                              const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_scaled_dot_kkt_fwd";
  const TensorView kv = to_view(op, "k", k);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), cu(op, "cu_seqlens", cu_seqlens);
  const TensorView a = to_view(op, "A", A);
  run_on_device_of(A, [&](Stream s) {
    fuseops::chunk_scaled_dot_kkt_fwd(a, kv, gv.get(), bv.get(), chunk_size, cu.get(), s);
  });
}

void solve_tril(at::Tensor& Ai, const at::Tensor& A, const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "solve_tril";
  const TensorView a = to_view(op, "A", A);
  const OptionalView cu(op, "cu_seqlens", cu_seqlens);
  const TensorView ai = to_view(op, "Ai", Ai);
  run_on_device_of(Ai, [&](Stream s) { fuseops::solve_tril(ai, a, cu.get(), s); });
}

void chunk_gated_delta_rule_fwd_kkt_solve(at::Tensor& Ai, const at::Tensor& k, const c10::optional<at::Tensor>& g,
                                          const c10::optional<at::Tensor>& beta, int64_t chunk_size,
                                          const c10::optional<at::Tensor>& cu_seqlens) {
  constexpr const char* op = "chunk_gated_delta_rule_fwd_kkt_solve";
  const TensorView kv = to_view(op, "k", k);
  const OptionalView gv(op, "g", g), bv(op, "beta", beta), cu(op, "cu_seqlens", cu_seqlens);
  const TensorView ai = to_view(op, "Ai", Ai);
  run_on_device_of(Ai, [&](Stream s) {
    fuseops::chunk_gated_delta_rule_fwd_kkt_solve(ai, kv, gv.get(), bv.get(), chunk_size, cu.get(), s);
  });
}

}  // namespace fuseops::torch_binding
