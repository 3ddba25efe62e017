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

  // Gated norm: docs/ops/norm.md.
  m.def("layer_norm_fwd(Tensor(a!) out, Tensor(b!)? mean, Tensor(c!)? rstd, Tensor x, Tensor weight, "
        "Tensor? bias=None, Tensor? z=None, float eps=1e-6, int group_size=0, bool norm_before_gate=True, "
        "bool is_rms_norm=False) -> ()");

  // Library-wide: the device error record (include/fuseops/error.h) and the version.
  m.def("check_errors(int device=-1) -> ()");
  m.def("clear_errors(int device=-1) -> ()");
  m.def("version() -> str");
}

namespace {

/// The kernels of every tensor op; the same functions serve CPU and CUDA tensors (the library dispatches by device).
void register_kernels(torch::Library& m) {
  using namespace fuseops::torch_binding;
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
}

}  // namespace

TORCH_LIBRARY_IMPL(fuseops, CPU, m) { register_kernels(m); }

#ifdef FUSEOPS_TORCH_CUDA  // set by bindings/torch/CMakeLists.txt when torch has CUDA and FUSEOPS_WITH_CUDA is on
TORCH_LIBRARY_IMPL(fuseops, CUDA, m) { register_kernels(m); }
#endif

// No tensor arguments, so no backend to dispatch on.
TORCH_LIBRARY_IMPL(fuseops, CompositeExplicitAutograd, m) {
  using namespace fuseops::torch_binding;
  m.impl("check_errors", TORCH_FN(check_errors));
  m.impl("clear_errors", TORCH_FN(clear_errors));
  m.impl("version", TORCH_FN(version));
}
