// fp32 math of the gated activations, shared by the CPU and CUDA backends so both evaluate the same formulas.
// The forms avoid cancellation (docs/ops/activation.md, "Numerics"):
//   silu(x)      = x sigma(x)                           (= x / (1 + e^-x))
//   gelu(x)      = 0.5 x erfc(-x / sqrt2)               (= 0.5 x (1 + erf(x / sqrt2)) without 1 + erf cancelling)
//   gelu_tanh(x) = x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3)   (= 0.5 x (1 + tanh u))
// with sigma evaluated from e^-|z| (no overflow, gradual underflow).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FUSEOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEOPS_HD inline
#endif

namespace fuseops::detail {

enum class Act : int { silu = 0, gelu = 1, gelu_tanh = 2 };

constexpr float kSqrtHalf = 0.70710678118654752440f;  // 1/sqrt(2)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2 pi)
constexpr float kGeluTanhCubic = 0.044715f;

/// The logistic function sigma(z) = 1 / (1 + e^-z) and 1 - sigma(z), from one exponential of -|z| so that neither
/// overflows nor cancels: for z < 0, sigma(z) = e^z / (1 + e^z) underflows gradually instead of dividing by an
/// infinite 1 + e^-z.
struct Logistic {
  float s;    ///< sigma(z)
  float oms;  ///< 1 - sigma(z)
};
FUSEOPS_HD Logistic logistic(float z) {
  const float e = expf(-fabsf(z));
  const float inv = 1.0f / (1.0f + e);
  const float small = e * inv;  // sigma(-|z|)
  return z >= 0.0f ? Logistic{inv, small} : Logistic{small, inv};
}

template <Act A>
FUSEOPS_HD float act_fwd(float x) {
  if constexpr (A == Act::silu) {
    return x * logistic(x).s;  // x sigma(x) = x / (1 + e^-x)
  } else if constexpr (A == Act::gelu) {
    return 0.5f * x * erfcf(-x * kSqrtHalf);
  } else {
    const float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    return x * logistic(2.0f * u).s;  // 0.5 x (1 + tanh u) = x sigma(2u)
  }
}

/// Derivative of act_fwd.
template <Act A>
FUSEOPS_HD float act_grad(float x) {
  if constexpr (A == Act::silu) {
    const Logistic l = logistic(x);
    return l.s * (1.0f + x * l.oms);  // sigma (1 + x (1 - sigma))
  } else if constexpr (A == Act::gelu) {
    return 0.5f * erfcf(-x * kSqrtHalf) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  } else {
    // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx with t = tanh u; 0.5 (1 + t) = s, 0.5 (1 - t^2) = 2 s (1 - s), s = sigma(2u).
    const float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    const Logistic l = logistic(2.0f * u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCubic * x * x);
    return l.s + 2.0f * x * l.s * l.oms * du;
  }
}

}  // namespace fuseops::detail
