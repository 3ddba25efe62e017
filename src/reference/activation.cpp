#include "reference/activation.h"

#include <algorithm>
#include <cmath>

namespace fuseops::reference {
namespace {
const double kPi = 3.14159265358979323846;

double logistic(double z) { return 1.0 / (1.0 + std::exp(-z)); }

double gelu_tanh_u(double x) { return std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x); }

// Second derivative by a central difference in double: only used to weight tolerances.
double act_grad2(Act a, double x) {
  if (!std::isfinite(x)) return 0.0;
  const double h = 1e-4 * std::max(1.0, std::fabs(x));
  return (act_grad(a, x + h) - act_grad(a, x - h)) / (2 * h);
}

// Products that follow IEEE inf/NaN rules but give a finite sensitivity weight.
double weight(double v) { return std::isfinite(v) ? std::fabs(v) : 0.0; }
}  // namespace

double act(Act a, double x) {
  switch (a) {
    case Act::silu: return x * logistic(x);  // x * sigmoid(x)
    case Act::gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // 0.5 x (1 + erf(x / sqrt 2))
    case Act::gelu_tanh: return x * logistic(2.0 * gelu_tanh_u(x));  // 0.5 x (1 + tanh u)
  }
  return 0;
}

double act_grad(Act a, double x) {
  switch (a) {
    case Act::silu: {
      const double s = logistic(x);
      return s + x * s * logistic(-x);  // s (1 + x (1 - s))
    }
    case Act::gelu:
      return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
    case Act::gelu_tanh: {
      const double u = gelu_tanh_u(x);
      const double t = std::tanh(u);
      const double half_one_plus_t = logistic(2.0 * u);
      const double one_minus_t2 = 4.0 * logistic(2.0 * u) * logistic(-2.0 * u);
      (void)t;
      return half_one_plus_t + 0.5 * x * one_minus_t2 * std::sqrt(2.0 / kPi) * (1.0 + 3.0 * 0.044715 * x * x);
    }
  }
  return 0;
}

GoldenValue act_and_mul_at(Act a, double g, double u) {
  // silu(-inf) = -inf * sigmoid(-inf) = NaN, as PyTorch; x * logistic(x) gives the same IEEE result.
  const double value = act(a, g) * u;
  return {value, weight(value) + weight(g * act_grad(a, g) * u), weight(u)};
}

GoldenBackwardValue act_and_mul_backward_at(Act a, double d, double g, double u) {
  GoldenBackwardValue v;
  v.dgate.value = d * u * act_grad(a, g);
  v.dgate.sensitivity = weight(v.dgate.value) + weight(g * d * u * act_grad2(a, g));
  v.dgate.flush_scale = weight(d * u);
  v.dup.value = d * act(a, g);
  v.dup.sensitivity = weight(v.dup.value) + weight(g * d * act_grad(a, g));
  v.dup.flush_scale = weight(d);
  return v;
}

Golden act_and_mul(Act a, const testing::HostTensor& gate, const testing::HostTensor& up) {
  const std::vector<double> g = gate.to_double(), u = up.to_double();
  Golden out;
  out.value.resize(g.size());
  out.sensitivity.resize(g.size());
  out.flush_scale.resize(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const GoldenValue v = act_and_mul_at(a, g[i], u[i]);
    out.value[i] = v.value;
    out.sensitivity[i] = v.sensitivity;
    out.flush_scale[i] = v.flush_scale;
  }
  return out;
}

Golden act_and_mul_fused(Act a, const testing::HostTensor& input) {
  const int64_t rows = input.rows(), d = input.cols() / 2;
  std::vector<int64_t> half_shape = input.shape();
  half_shape.back() = d;
  testing::HostTensor gate(DType::f32, half_shape), up(DType::f32, half_shape);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      gate.set(r, c, static_cast<float>(input.get(r, c)));  // exact: every storage dtype fits in f32
      up.set(r, c, static_cast<float>(input.get(r, d + c)));
    }
  }
  return act_and_mul(a, gate, up);
}

GoldenBackward act_and_mul_backward(Act a, const testing::HostTensor& dout, const testing::HostTensor& gate,
                                    const testing::HostTensor& up) {
  const std::vector<double> d = dout.to_double(), g = gate.to_double(), u = up.to_double();
  GoldenBackward out;
  for (Golden* x : {&out.dgate, &out.dup}) {
    x->value.resize(g.size());
    x->sensitivity.resize(g.size());
    x->flush_scale.resize(g.size());
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    const GoldenBackwardValue v = act_and_mul_backward_at(a, d[i], g[i], u[i]);
    out.dgate.value[i] = v.dgate.value;
    out.dgate.sensitivity[i] = v.dgate.sensitivity;
    out.dup.value[i] = v.dup.value;
    out.dup.sensitivity[i] = v.dup.sensitivity;
    out.dgate.flush_scale[i] = v.dgate.flush_scale;
    out.dup.flush_scale[i] = v.dup.flush_scale;
  }
  return out;
}

}  // namespace fuseops::reference
