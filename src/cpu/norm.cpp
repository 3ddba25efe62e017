// CPU backend of the gated norm: fp32 math, statistics by pairwise summation (error O(log G) ulps, like the GPU's
// tree reduction), one rounding at the store.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/act_math.h"
#include "cpu/row_access.h"
#include "ops/norm_impl.h"

namespace fuseops::detail::cpu {
namespace {

/// Sum of v[0, n) by recursive halving.
float pairwise_sum(const float* v, int64_t n) {
  if (n <= 8) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    return s;
  }
  const int64_t h = n / 2;
  return pairwise_sum(v, h) + pairwise_sum(v + h, n - h);
}

float silu(float z) { return act_fwd<Act::silu>(z); }

}  // namespace

void layer_norm_fwd(const LayerNormArgs& a) {
  const int64_t G = a.group_size, M = a.x.rows;
  std::vector<float> xs(static_cast<size_t>(G)), sq(static_cast<size_t>(G));
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t g = 0; g < a.ngroups; ++g) {
      const int64_t c0 = g * G;
      for (int64_t i = 0; i < G; ++i) {
        float x = load(a.x, r, c0 + i);
        if (a.gate == NormGate::before_norm) x *= silu(load(a.z, r, c0 + i));
        xs[i] = x;
      }
      const float n = static_cast<float>(G);
      float mean = 0.0f;
      if (!a.rms) mean = pairwise_sum(xs.data(), G) / n;
      for (int64_t i = 0; i < G; ++i) {
        const float c = xs[i] - mean;  // mean is 0 for RMSNorm
        sq[i] = c * c;
      }
      const float rstd = 1.0f / std::sqrt(pairwise_sum(sq.data(), G) / n + a.eps);
      const int64_t stat = g * M + r;
      if (a.mean) a.mean[stat] = mean;
      if (a.rstd) a.rstd[stat] = rstd;
      for (int64_t i = 0; i < G; ++i) {
        float y = (xs[i] - mean) * rstd * load(a.weight, a.w_dtype, c0 + i);
        if (a.bias) y += load(a.bias, a.w_dtype, c0 + i);
        if (a.gate == NormGate::after_norm) y *= silu(load(a.z, r, c0 + i));
        store(a.out, r, c0 + i, y);
      }
    }
  }
}

}  // namespace fuseops::detail::cpu
