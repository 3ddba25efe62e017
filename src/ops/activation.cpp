// Gated activations: validation (once, for every backend) and dispatch.
#include <string>

#include "core/dispatch.h"
#include "cuda/device_error.h"
#include "fuseops/activation.h"
#include "ops/activation_impl.h"

namespace fuseops {
namespace detail {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16};

/// The activation of a gelu op `op` (named in the error for a bad enum value).
Act gelu_act(const char* op, GeluApproximate approximate) {
  switch (approximate) {
    case GeluApproximate::none: return Act::gelu;
    case GeluApproximate::tanh: return Act::gelu_tanh;
  }
  throw Error(ErrorKind::invalid_argument, std::string(op) + ": approximate: expected none | tanh, got code " +
                                               std::to_string(static_cast<int>(approximate)));
}

void run_forward(const char* op, const ActAndMulArgs& args, const Device& device, Stream stream) {
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (args.out.rows == 0 || args.out.cols == 0) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::act_and_mul(op, args, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::act_and_mul(args);
  }
}

void fused_forward(const char* op, Act act, TensorView out, TensorView input, Stream stream) {
  check_dtype(op, "input", input, kFloatTypes);
  check_same_dtype(op, "out", out, "input", input);
  const Device device = common_device(op, {{"out", &out}, {"input", &input}});
  if (input.rank < 1) fail_argument(op, "input", "rank >= 1 [..., 2*d]", "rank 0");
  const int64_t two_d = input.shape[input.rank - 1];
  if (two_d < 2 || two_d % 2 != 0) {
    fail_argument(op, "input", "an even last dim 2*d >= 2", std::to_string(two_d) + " in " + input.shape_str());
  }
  const int64_t d = two_d / 2;
  check_shape_like(op, "out", out, "input", input, d);
  const RowMatrix in = as_row_matrix(op, "input", input);
  const RowMatrix o = as_row_matrix(op, "out", out);
  check_no_overlap(op, "out", o, "input", in);
  ActAndMulArgs args{act, o, in, in};
  args.gate.cols = d;
  args.up.cols = d;
  // (no rows: an extent past 64 bits was never checked, so d * element size is formed only where there are rows)
  if (in.rows > 0) args.up.data = static_cast<char*>(in.data) + d * static_cast<int64_t>(dtype_size(in.dtype));
  run_forward(op, args, device, stream);
}

void split_forward(const char* op, Act act, TensorView out, TensorView gate, TensorView up, Stream stream) {
  check_dtype(op, "gate", gate, kFloatTypes);
  check_same_dtype(op, "up", up, "gate", gate);
  check_same_dtype(op, "out", out, "gate", gate);
  const Device device = common_device(op, {{"out", &out}, {"gate", &gate}, {"up", &up}});
  if (gate.rank < 1) fail_argument(op, "gate", "rank >= 1 [..., d]", "rank 0");
  const int64_t d = gate.shape[gate.rank - 1];
  check_shape_like(op, "up", up, "gate", gate, d);
  check_shape_like(op, "out", out, "gate", gate, d);
  const ActAndMulArgs args{act, as_row_matrix(op, "out", out), as_row_matrix(op, "gate", gate),
                           as_row_matrix(op, "up", up)};
  check_no_overlap(op, "out", args.out, "gate", args.gate);
  check_no_overlap(op, "out", args.out, "up", args.up);
  run_forward(op, args, device, stream);
}

void backward(const char* op, Act act, TensorView dgate, TensorView dup, TensorView dout, TensorView gate,
              TensorView up, Stream stream) {
  check_dtype(op, "dout", dout, kFloatTypes);
  check_same_dtype(op, "gate", gate, "dout", dout);
  check_same_dtype(op, "up", up, "dout", dout);
  check_same_dtype(op, "dgate", dgate, "dout", dout);
  check_same_dtype(op, "dup", dup, "dout", dout);
  const Device device =
      common_device(op, {{"dgate", &dgate}, {"dup", &dup}, {"dout", &dout}, {"gate", &gate}, {"up", &up}});
  if (dout.rank < 1) fail_argument(op, "dout", "rank >= 1 [..., d]", "rank 0");
  const int64_t d = dout.shape[dout.rank - 1];
  check_shape_like(op, "gate", gate, "dout", dout, d);
  check_shape_like(op, "up", up, "dout", dout, d);
  check_shape_like(op, "dgate", dgate, "dout", dout, d);
  check_shape_like(op, "dup", dup, "dout", dout, d);
  const ActAndMulBackwardArgs args{act,
                                   as_row_matrix(op, "dgate", dgate),
                                   as_row_matrix(op, "dup", dup),
                                   as_row_matrix(op, "dout", dout),
                                   as_row_matrix(op, "gate", gate),
                                   as_row_matrix(op, "up", up)};
  const NamedView outs[] = {{"dgate", &dgate}, {"dup", &dup}};
  const RowMatrix* out_m[] = {&args.dgate, &args.dup};
  const char* in_names[] = {"dout", "gate", "up"};
  const RowMatrix* in_m[] = {&args.dout, &args.gate, &args.up};
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 3; ++i) check_no_overlap(op, outs[o].name, *out_m[o], in_names[i], *in_m[i]);
  }
  check_no_overlap(op, "dup", args.dup, "dgate", args.dgate);
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (args.dgate.rows == 0 || d == 0) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::act_and_mul_backward(op, args, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::act_and_mul_backward(args);
  }
}

/// [E, T_max, width] with innermost stride 1 (any other non-negative strides: check_layout).
void check_expert_major(const char* op, const char* name, const TensorView& v, const std::string& dims) {
  if (v.rank != 3) fail_argument(op, name, "rank 3 " + dims, v.shape_str());
  if (v.shape[2] > 1 && v.strides[2] != 1) {
    fail_argument(op, name, "innermost stride 1", "stride " + std::to_string(v.strides[2]));
  }
}

void masked_forward(const char* op, Act act, TensorView out, TensorView input, TensorView masked_m, Stream stream) {
  check_dtype(op, "input", input, kFloatTypes);
  check_same_dtype(op, "out", out, "input", input);
  check_dtype(op, "masked_m", masked_m, {DType::i32, DType::i64});
  const Device device = common_device(op, {{"out", &out}, {"input", &input}, {"masked_m", &masked_m}});
  check_expert_major(op, "input", input, "[E, T_max, 2*d]");
  const int64_t E = input.shape[0], T_max = input.shape[1], two_d = input.shape[2];
  if (two_d < 2 || two_d % 2 != 0) {
    fail_argument(op, "input", "an even last dim 2*d >= 2", std::to_string(two_d) + " in " + input.shape_str());
  }
  check_expert_major(op, "out", out, "[E, T_max, d]");
  check_shape_like(op, "out", out, "input", input, two_d / 2);
  check_no_internal_overlap(op, "out", out);  // rows or experts sharing elements would race (CUDA) or be overwritten
  if (masked_m.rank != 1 || masked_m.shape[0] != E) {
    fail_argument(op, "masked_m", "shape [E] = [" + std::to_string(E) + "]", masked_m.shape_str());
  }
  if (E > kMaxMaskedExperts) {
    fail_argument(op, "input", "at most " + std::to_string(kMaxMaskedExperts) + " experts", std::to_string(E));
  }
  check_disjoint(op, "out", out, "input", input);
  check_disjoint(op, "out", out, "masked_m", masked_m);  // an input too: rows written over it would change the counts
  MaskedActArgs a;
  a.act = act;
  a.dtype = input.dtype;
  a.E = E;
  a.T_max = T_max;
  a.d = two_d / 2;
  a.out = out.data;
  a.input = input.data;
  a.out_stride_e = out.strides[0];
  a.out_stride_t = out.strides[1];
  a.in_stride_e = input.strides[0];
  a.in_stride_t = input.strides[1];
  a.masked_m = masked_m.data;
  a.m_dtype = masked_m.dtype;
  a.m_stride = masked_m.strides[0];
  a.site = error_site(op, "masked_m", "the index is the expert e: expected a count in [0, T_max]; it is clamped to "
                                       "that range");
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (E == 0) return;  // with T_max == 0 the kernel still checks masked_m
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::act_and_mul_masked(op, a, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::act_and_mul_masked(a);
  }
}

}  // namespace
}  // namespace detail

GeluApproximate parse_gelu_approximate(const std::string& approximate) {
  if (approximate == "none") return GeluApproximate::none;
  if (approximate == "tanh") return GeluApproximate::tanh;
  throw Error(ErrorKind::invalid_argument,
              "gelu_and_mul: approximate: expected \"none\" | \"tanh\", got " + quoted_text(approximate));
}

void silu_and_mul(TensorView out, TensorView input, Stream stream) {
  detail::fused_forward("silu_and_mul", detail::Act::silu, out, input, stream);
}

void gelu_and_mul(TensorView out, TensorView input, GeluApproximate approximate, Stream stream) {
  const char* op = "gelu_and_mul";
  detail::fused_forward(op, detail::gelu_act(op, approximate), out, input, stream);
}

void gelu_tanh_and_mul(TensorView out, TensorView input, Stream stream) {
  detail::fused_forward("gelu_tanh_and_mul", detail::Act::gelu_tanh, out, input, stream);
}

void silu_and_mul_split(TensorView out, TensorView gate, TensorView up, Stream stream) {
  detail::split_forward("silu_and_mul_split", detail::Act::silu, out, gate, up, stream);
}

void gelu_and_mul_split(TensorView out, TensorView gate, TensorView up, GeluApproximate approximate,
                        Stream stream) {
  const char* op = "gelu_and_mul_split";
  detail::split_forward(op, detail::gelu_act(op, approximate), out, gate, up, stream);
}

void silu_and_mul_backward(TensorView dgate, TensorView dup, TensorView dout, TensorView gate, TensorView up,
                           Stream stream) {
  detail::backward("silu_and_mul_backward", detail::Act::silu, dgate, dup, dout, gate, up, stream);
}

void gelu_and_mul_backward(TensorView dgate, TensorView dup, TensorView dout, TensorView gate, TensorView up,
                           GeluApproximate approximate, Stream stream) {
  const char* op = "gelu_and_mul_backward";
  detail::backward(op, detail::gelu_act(op, approximate), dgate, dup, dout, gate, up, stream);
}

void silu_and_mul_masked(TensorView out, TensorView input, TensorView masked_m, Stream stream) {
  detail::masked_forward("silu_and_mul_masked", detail::Act::silu, out, input, masked_m, stream);
}

void gelu_and_mul_masked(TensorView out, TensorView input, TensorView masked_m, GeluApproximate approximate,
                         Stream stream) {
  const char* op = "gelu_and_mul_masked";
  detail::masked_forward(op, detail::gelu_act(op, approximate), out, input, masked_m, stream);
}

}  // namespace fuseops
