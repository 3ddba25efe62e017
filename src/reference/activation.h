// Float64 golden of the gated activations: the textbook formulas evaluated in double, independent of the
// backends' fp32 forms. Besides each value it returns a sensitivity |x * d(value)/dx| summed over the inputs,
// which scales the error an fp32 evaluation is allowed (docs/ops/activation.md, "Tolerances").
#pragma once

#include <vector>

#include "common/act_math.h"
#include "testing/host_tensor.h"

namespace fuseops::reference {

using detail::Act;

double act(Act a, double x);
double act_grad(Act a, double x);

/// One golden element: the value and its sensitivity.
struct GoldenValue {
  double value;
  double sensitivity;
  double flush_scale;  ///< magnitude of the operands that multiply the activation (see testing/compare.h)
};
/// out = act(g) * u at one element.
GoldenValue act_and_mul_at(Act a, double g, double u);
/// (dgate, dup) at one element.
struct GoldenBackwardValue {
  GoldenValue dgate, dup;
};
GoldenBackwardValue act_and_mul_backward_at(Act a, double dout, double g, double u);

/// Values and sensitivities, row-major [rows, d].
struct Golden {
  std::vector<double> value;
  std::vector<double> sensitivity;
  std::vector<double> flush_scale;
};

/// out = act(gate) * up.
Golden act_and_mul(Act a, const testing::HostTensor& gate, const testing::HostTensor& up);
/// Same from a fused [..., 2d] input (gate = first half).
Golden act_and_mul_fused(Act a, const testing::HostTensor& input);

struct GoldenBackward {
  Golden dgate, dup;
};
/// dgate = dout * up * act'(gate), dup = dout * act(gate).
GoldenBackward act_and_mul_backward(Act a, const testing::HostTensor& dout, const testing::HostTensor& gate,
                                    const testing::HostTensor& up);

}  // namespace fuseops::reference
