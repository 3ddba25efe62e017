#include "reference/norm.h"

#include <cmath>

namespace fuseops::reference {
namespace {
double silu(double z) { return z / (1.0 + std::exp(-z)); }
double mag(double v) { return std::isfinite(v) ? std::fabs(v) : 0.0; }
}  // namespace

NormGolden layer_norm_fwd(const testing::HostTensor& x, const testing::HostTensor* z, const testing::HostTensor& weight,
                          const testing::HostTensor* bias, double eps, int64_t group_size, NormGate gate, bool rms) {
  const int64_t M = x.rows(), N = x.cols(), G = group_size == 0 ? N : group_size, ngroups = N / G;
  NormGolden g;
  g.out.resize(M * N);
  g.out_sens.resize(M * N);
  g.out_flush.resize(M * N);
  for (auto* v : {&g.mean, &g.mean_sens, &g.rstd, &g.rstd_sens}) v->resize(ngroups * M);
  std::vector<double> xs(G), amp(G), zs(G);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t grp = 0; grp < ngroups; ++grp) {
      const int64_t c0 = grp * G;
      // x' = x * silu(z) before the norm; amp = relative perturbation weight of x' (1 + |z| for a SiLU factor).
      double abs_sum = 0, abs_x = 0;
      for (int64_t i = 0; i < G; ++i) {
        zs[i] = z ? z->get(r, c0 + i) : 0.0;
        const double xi = x.get(r, c0 + i);
        xs[i] = gate == NormGate::before_norm ? xi * silu(zs[i]) : xi;
        amp[i] = gate == NormGate::before_norm ? 1.0 + mag(zs[i]) : 1.0;
        abs_sum += mag(xs[i]) * amp[i];
        abs_x += mag(xi);
      }
      double mean = 0;
      if (!rms) {
        for (int64_t i = 0; i < G; ++i) mean += xs[i];
        mean /= static_cast<double>(G);
      }
      double var = 0, spread = 0;  // spread: how much perturbing x' moves var, relative
      for (int64_t i = 0; i < G; ++i) {
        var += (xs[i] - mean) * (xs[i] - mean);
        spread += mag(xs[i] - mean) * mag(xs[i]) * amp[i];
      }
      const double A = var > 0 && std::isfinite(var) ? spread / var : 0.0;
      var /= static_cast<double>(G);
      const double rstd = 1.0 / std::sqrt(var + eps);
      const int64_t s = grp * M + r;
      g.mean[s] = rms ? 0.0 : mean;
      g.mean_sens[s] = abs_sum / static_cast<double>(G);
      g.rstd[s] = rstd;
      g.rstd_sens[s] = mag(rstd) * (1.0 + A);
      for (int64_t i = 0; i < G; ++i) {
        const int64_t c = c0 + i, o = r * N + c;
        const double w = weight.get(0, c), b = bias ? bias->get(0, c) : 0.0;
        double y = (xs[i] - mean) * rstd * w + b;
        const double core = mag((xs[i] - mean) * rstd * w);
        double post = 1.0, post_amp = 1.0;
        if (gate == NormGate::after_norm) {
          post = silu(zs[i]);
          post_amp = 1.0 + mag(zs[i]);
          g.out_flush[o] = mag(y);
          y *= post;
        } else {
          g.out_flush[o] = gate == NormGate::before_norm ? mag(w) * mag(rstd) * (mag(x.get(r, c)) + abs_x / G) : 0.0;
        }
        double sens = (core * (amp[i] + A) + mag(b)) * post_amp;
        if (!rms) sens += mag(w) * mag(rstd) * abs_sum / static_cast<double>(G);
        g.out[o] = y;
        g.out_sens[o] = sens * mag(post);
      }
    }
  }
  return g;
}

}  // namespace fuseops::reference
