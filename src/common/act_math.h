// fp32 math of the gated activations, shared by the CPU and CUDA backends so both evaluate the same formulas.
// The forms avoid cancellation (docs/ops/activation.md, "Numerics"):
//   silu(x)      = x sigma(x)                           (= x / (1 + e^-x))
//   gelu(x)      = 0.5 x erfc(-x / sqrt2)               (= 0.5 x (1 + erf(x / sqrt2)) without 1 + erf cancelling)
//   gelu_tanh(x) = x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3)   (= 0.5 x (1 + tanh u))
// with sigma evaluated from e^-|z| (no overflow, gradual underflow), and Phi(x) = 0.5 erfc(-x / sqrt 2).
#pragma once

#include <cmath>

#include "common/hd.h"

namespace fuseops::detail {

enum class Act : int { silu = 0, gelu = 1, gelu_tanh = 2 };

constexpr float kSqrtHalf = 0.70710678118654752440f;  // 1/sqrt(2)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2 pi)
constexpr float kGeluTanhCubic = 0.044715f;

// Two evaluation policies, chosen per storage dtype by the backends:
//  - precise (Fast = false): accurate expf, IEEE division, erfcf. f32 outputs, and every CPU evaluation.
//  - fast (Fast = true): the GPU's exp2 and reciprocal approximations (ex2.approx, rcp.approx: <= 2 ulp) and a
//    polynomial erfc (below). Their error is a few fp32 ulp plus ~|x| ulp from rounding the exponent's argument,
//    i.e. the exact function at an input perturbed by a few ulp: far below the rounding to f16 / bf16 at the
//    store, for which this policy is used. They flush subnormal results (below 2^-126) to zero; in every formula
//    here such an intermediate is multiplied by factors of at most ~272 besides the op's other operands (up, dout),
//    so the flush changes a result by at most 2^-117 times those operands' magnitudes (testing/compare.h). It costs
//    about half the instructions, which matters because at ~45 instructions per element the precise form is as
//    slow as the memory traffic (docs/ops/activation.md).
// On the host exp_ and recip_ are the precise functions under either policy.

/// e^x.
template <bool Fast>
FUSEOPS_HD float exp_(float x) {
#if defined(__CUDA_ARCH__)
  if constexpr (Fast) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
  }
#endif
  return expf(x);
}

/// 1 / y.
template <bool Fast>
FUSEOPS_HD float recip_(float y) {
#if defined(__CUDA_ARCH__)
  if constexpr (Fast) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
    return r;
  }
#endif
  return 1.0f / y;
}

/// erfc(z) for z >= 0 (fast policy): t e^(-z^2 + P(t)), t = 1 / (1 + z/2), P a degree-9 least-squares fit of
/// ln(erfc(z) / t) + z^2 on Chebyshev nodes of t in [1/6.25, 1] (z in [0, 10.5]; beyond, erfc underflows fp32).
/// Fit error 5e-8, 2.5e-7 with fp32 Horner evaluation: a relative error of a few ulp.
FUSEOPS_HD float erfc_poly_nonneg(float z) {
  const float t = recip_<true>(1.0f + 0.5f * z);
  float p = 1.487911493e-01f;
  p = p * t - 7.018472552e-01f;
  p = p * t + 1.206169486e+00f;
  p = p * t - 7.619841695e-01f;
  p = p * t - 2.599468268e-02f;
  p = p * t - 2.751209214e-02f;
  p = p * t + 4.436234385e-02f;
  p = p * t + 3.846063614e-01f;
  p = p * t + 9.988684058e-01f;
  p = p * t - 1.265459538e+00f;
  return t * exp_<true>(p - z * z);
}

/// Phi(x) = P(N(0,1) <= x) = 0.5 erfc(-x / sqrt 2), without cancellation for x < 0.
template <bool Fast>
FUSEOPS_HD float normal_cdf(float x) {
  if constexpr (Fast) {
    const float half_erfc = 0.5f * erfc_poly_nonneg(fabsf(x) * kSqrtHalf);  // Phi(-|x|)
    return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
  } else {
    return 0.5f * erfcf(-x * kSqrtHalf);
  }
}

/// The logistic function sigma(z) = 1 / (1 + e^-z) and 1 - sigma(z), from one exponential of -|z| so that neither
/// overflows nor cancels: for z < 0, sigma(z) = e^z / (1 + e^z) underflows gradually instead of dividing by an
/// infinite 1 + e^-z.
struct Logistic {
  float s;    ///< sigma(z)
  float oms;  ///< 1 - sigma(z)
};
template <bool Fast>
FUSEOPS_HD Logistic logistic(float z) {
  const float e = exp_<Fast>(-fabsf(z));
  const float inv = recip_<Fast>(1.0f + e);
  const float small = e * inv;  // sigma(-|z|)
  return z >= 0.0f ? Logistic{inv, small} : Logistic{small, inv};
}

template <Act A, bool Fast = false>
FUSEOPS_HD float act_fwd(float x) {
  if constexpr (A == Act::silu) {
    return x * logistic<Fast>(x).s;  // x sigma(x) = x / (1 + e^-x)
  } else if constexpr (A == Act::gelu) {
    return x * normal_cdf<Fast>(x);  // 0.5 x (1 + erf(x / sqrt 2))
  } else {
    const float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    return x * logistic<Fast>(2.0f * u).s;  // 0.5 x (1 + tanh u) = x sigma(2u)
  }
}

/// Derivative of act_fwd.
template <Act A, bool Fast = false>
FUSEOPS_HD float act_grad(float x) {
  if constexpr (A == Act::silu) {
    const Logistic l = logistic<Fast>(x);
    return l.s * (1.0f + x * l.oms);  // sigma (1 + x (1 - sigma))
  } else if constexpr (A == Act::gelu) {
    return normal_cdf<Fast>(x) + x * kInvSqrt2Pi * exp_<Fast>(-0.5f * x * x);  // Phi(x) + x phi(x)
  } else {
    // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx with t = tanh u; 0.5 (1 + t) = s, 0.5 (1 - t^2) = 2 s (1 - s), s = sigma(2u).
    const float u = kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x);
    // For finite x where s (1 - s) is 0 in fp32 (|x| >~ 10.7, or >~ 10.0 with the fast exp) the second term is 0 and
    // is left out, since du = 0.134 x^2 + .. overflows to inf for |x| >~ 5.04e19 and 0 x inf would be NaN (the same
    // value as the full formula wherever du is finite); x = +-inf or NaN keeps the formula's NaN, as the golden.
    const Logistic l = logistic<Fast>(2.0f * u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCubic * x * x);
    const bool finite_zero_term = l.s * l.oms == 0.0f && fabsf(x) <= 3.40282346638528859812e38f;
    return finite_zero_term ? l.s : l.s + 2.0f * x * l.s * l.oms * du;
  }
}

}  // namespace fuseops::detail
