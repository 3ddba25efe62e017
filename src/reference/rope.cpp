#include "reference/rope.h"

#include <algorithm>
#include <cmath>

namespace fuseops::reference {

std::vector<double> rope_inv_freq(double base, int64_t rotary_dim) {
  std::vector<double> f(static_cast<std::size_t>(rotary_dim / 2));
  for (std::size_t j = 0; j < f.size(); ++j) f[j] = std::pow(base, -2.0 * static_cast<double>(j) / rotary_dim);
  return f;
}

std::vector<double> rope_cache_row(const std::vector<double>& inv_freq, int64_t p) {
  const std::size_t h = inv_freq.size();
  std::vector<double> row(2 * h);
  for (std::size_t j = 0; j < h; ++j) {
    row[j] = std::cos(static_cast<double>(p) * inv_freq[j]);
    row[h + j] = std::sin(static_cast<double>(p) * inv_freq[j]);
  }
  return row;
}

std::vector<int> mrope_axes(MropeLayout layout, const std::array<int64_t, 3>& section, int64_t pairs) {
  std::vector<int> axis(static_cast<std::size_t>(pairs), 0);
  if (layout == MropeLayout::chunked) {
    // Consecutive runs: s_t pairs of T, then s_h of H, then s_w of W.
    int64_t j = 0;
    for (int a = 0; a < 3; ++a) {
      for (int64_t n = 0; n < section[a] && j < pairs; ++n) axis[j++] = a;
    }
  } else if (layout == MropeLayout::interleaved) {
    // HF apply_interleaved_mrope: start from T; H at indices 1, 4, ... below 3 s_h; W at 2, 5, ... below 3 s_w.
    for (int64_t j = 1; j < std::min(pairs, 3 * section[1]); j += 3) axis[j] = 1;
    for (int64_t j = 2; j < std::min(pairs, 3 * section[2]); j += 3) axis[j] = 2;
  } else {
    // GLM round-robin: slot j % 3 names the preferred axis; an axis whose quota is spent hands over to the next.
    std::array<int64_t, 3> used = {0, 0, 0};
    for (int64_t j = 0; j < pairs; ++j) {
      for (int k = 0; k < 3; ++k) {
        const int a = static_cast<int>((j + k) % 3);
        if (used[a] < section[a]) {
          axis[j] = a;
          ++used[a];
          break;
        }
      }
    }
  }
  return axis;
}

void rope_head(const std::vector<double>& x, const std::vector<double>& cos, const std::vector<double>& sin,
               bool is_neox, bool inverse, std::vector<double>& y, std::vector<double>& sens) {
  const std::size_t h = cos.size();
  y = x;
  sens.assign(x.size(), 0.0);
  for (std::size_t j = 0; j < h; ++j) {
    const std::size_t a = is_neox ? j : 2 * j, b = is_neox ? j + h : 2 * j + 1;
    const double c = cos[j], s = inverse ? -sin[j] : sin[j];
    y[a] = x[a] * c - x[b] * s;
    y[b] = x[b] * c + x[a] * s;
    sens[a] = std::fabs(x[a] * c) + std::fabs(x[b] * s);
    sens[b] = std::fabs(x[b] * c) + std::fabs(x[a] * s);
  }
}

}  // namespace fuseops::reference
