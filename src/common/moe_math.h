// fp32 rules of the MoE routers shared by the CPU and CUDA backends (docs/ops/moe.md, "Semantics"): how a logit
// or bias value is made finite, the scores, and the total order used for every selection.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#if !defined(FUSEOPS_HD)
#if defined(__CUDACC__)
#define FUSEOPS_HD __host__ __device__ __forceinline__
#else
#define FUSEOPS_HD inline
#endif
#endif

namespace fuseops::detail {

/// NaN -> -FLT_MAX (NaN counts as -inf), +-inf -> +-FLT_MAX, -0 -> +0; finite values unchanged.
FUSEOPS_HD float moe_sanitize(float x) {
  if (x != x) return -FLT_MAX;
  return fminf(fmaxf(x, -FLT_MAX), FLT_MAX) + 0.0f;
}

/// sigmoid of a finite fp32 logit: 1 / (1 + e^-x) (0 for x <= -104, 1 for large x).
FUSEOPS_HD float moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// An unsigned key whose unsigned order is the float order (-inf lowest); 0 is below every float.
FUSEOPS_HD uint32_t moe_order_key(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

FUSEOPS_HD float moe_key_float(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

/// ceil(a / b) * b for a >= 0, b >= 1.
FUSEOPS_HD int64_t moe_round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

}  // namespace fuseops::detail
