// torch kernels of the gated activations: convert, guard, current stream, call (include/fuseops/activation.h).
// Inputs are converted before outputs, so a bad tensor that the Python API allocated an output from is reported
// under the input's name.
#include <vector>

#include "fuseops/activation.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {
namespace {

// Parsed here rather than by fuseops::parse_gelu_approximate so that no std::string crosses into the library: its
// C++ ABI (_GLIBCXX_USE_CXX11_ABI) may differ from the one torch's headers select.
GeluApproximate approximate_of(const char* op, c10::string_view approximate) {
  if (approximate == "none") return GeluApproximate::none;
  if (approximate == "tanh") return GeluApproximate::tanh;
  TORCH_CHECK_VALUE(false, op, ": approximate: expected \"none\" | \"tanh\", got ",
                    quoted_text(std::string_view(approximate.data(), approximate.size())));
  return GeluApproximate::none;  // unreachable
}

}  // namespace

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  constexpr const char* op = "silu_and_mul";
  Written written;
  const TensorView in = to_view(op, "input", input);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::silu_and_mul(o, in, s); });
}

void gelu_and_mul(at::Tensor& out, const at::Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "gelu_and_mul";
  Written written;
  const GeluApproximate a = approximate_of(op, approximate);
  const TensorView in = to_view(op, "input", input);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::gelu_and_mul(o, in, a, s); });
}

void gelu_tanh_and_mul(at::Tensor& out, const at::Tensor& input) {
  constexpr const char* op = "gelu_tanh_and_mul";
  Written written;
  const TensorView in = to_view(op, "input", input);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::gelu_tanh_and_mul(o, in, s); });
}

void silu_and_mul_split(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up) {
  constexpr const char* op = "silu_and_mul_split";
  Written written;
  const TensorView g = to_view(op, "gate", gate);
  const TensorView u = to_view(op, "up", up);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::silu_and_mul_split(o, g, u, s); });
}

void gelu_and_mul_split(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "gelu_and_mul_split";
  Written written;
  const GeluApproximate a = approximate_of(op, approximate);
  const TensorView g = to_view(op, "gate", gate);
  const TensorView u = to_view(op, "up", up);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::gelu_and_mul_split(o, g, u, a, s); });
}

void silu_and_mul_backward(at::Tensor& dgate, at::Tensor& dup, const at::Tensor& dout, const at::Tensor& gate,
                           const at::Tensor& up) {
  constexpr const char* op = "silu_and_mul_backward";
  Written written;
  const TensorView dc = to_view(op, "dout", dout);
  const TensorView g = to_view(op, "gate", gate);
  const TensorView u = to_view(op, "up", up);
  const TensorView dg = written.add(op, "dgate", dgate);
  const TensorView du = written.add(op, "dup", dup);
  run_on_device_of(dgate, written, [&](Stream s) { fuseops::silu_and_mul_backward(dg, du, dc, g, u, s); });
}

void gelu_and_mul_backward(at::Tensor& dgate, at::Tensor& dup, const at::Tensor& dout, const at::Tensor& gate,
                           const at::Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "gelu_and_mul_backward";
  Written written;
  const GeluApproximate a = approximate_of(op, approximate);
  const TensorView dc = to_view(op, "dout", dout);
  const TensorView g = to_view(op, "gate", gate);
  const TensorView u = to_view(op, "up", up);
  const TensorView dg = written.add(op, "dgate", dgate);
  const TensorView du = written.add(op, "dup", dup);
  run_on_device_of(dgate, written, [&](Stream s) { fuseops::gelu_and_mul_backward(dg, du, dc, g, u, a, s); });
}

void silu_and_mul_masked(at::Tensor& out, const at::Tensor& input, const at::Tensor& masked_m) {
  constexpr const char* op = "silu_and_mul_masked";
  Written written;
  const TensorView in = to_view(op, "input", input);
  const TensorView m = to_view(op, "masked_m", masked_m);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::silu_and_mul_masked(o, in, m, s); });
}

void gelu_and_mul_masked(at::Tensor& out, const at::Tensor& input, const at::Tensor& masked_m,
                         c10::string_view approximate) {
  constexpr const char* op = "gelu_and_mul_masked";
  Written written;
  const GeluApproximate a = approximate_of(op, approximate);
  const TensorView in = to_view(op, "input", input);
  const TensorView m = to_view(op, "masked_m", masked_m);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) { fuseops::gelu_and_mul_masked(o, in, m, a, s); });
}

namespace {
/// [..., 2d] -> an uninitialised [..., d] like `input` (rank 0 is left to the op's validation via a [0] output).
at::Tensor half_width_like(const char* op, const at::Tensor& input) {
  TORCH_CHECK_VALUE(input.dim() >= 1, op, ": input: expected rank >= 1 [..., 2*d], got rank 0");
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() /= 2;
  return at::empty(shape, input.options());
}
}  // namespace

at::Tensor silu_and_mul_functional(const at::Tensor& input) {
  at::Tensor out = half_width_like("silu_and_mul", input);
  silu_and_mul(out, input);
  return out;
}

at::Tensor gelu_and_mul_functional(const at::Tensor& input, c10::string_view approximate) {
  at::Tensor out = half_width_like("gelu_and_mul", input);
  gelu_and_mul(out, input, approximate);
  return out;
}

at::Tensor gelu_tanh_and_mul_functional(const at::Tensor& input) {
  at::Tensor out = half_width_like("gelu_tanh_and_mul", input);
  gelu_tanh_and_mul(out, input);
  return out;
}

at::Tensor silu_and_mul_split_functional(const at::Tensor& gate, const at::Tensor& up) {
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  silu_and_mul_split(out, gate, up);
  return out;
}

at::Tensor gelu_and_mul_split_functional(const at::Tensor& gate, const at::Tensor& up, c10::string_view approximate) {
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  gelu_and_mul_split(out, gate, up, approximate);
  return out;
}

}  // namespace fuseops::torch_binding
