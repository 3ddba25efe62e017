// Float64 golden of the rotary embeddings: the textbook rotation of each pair, written for clarity and independent
// of the backends (its own M-RoPE axis rules, its own cache construction). Each value comes with a sensitivity
// |x_a cos| + |x_b sin| (the magnitude of the two products an fp32 evaluation rounds), which scales the error an
// fp32 evaluation is allowed (docs/ops/rope.md, "Tolerances").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "fuseops/rope.h"

namespace fuseops::reference {

/// inv_freq[j] = base^(-2j / r), j < r / 2 (the unscaled RoPE frequencies).
std::vector<double> rope_inv_freq(double base, int64_t rotary_dim);

/// Row p of a cos_sin_cache in float64: [cos(p f_0) .. cos(p f_{h-1}), sin(p f_0) .. sin(p f_{h-1})].
std::vector<double> rope_cache_row(const std::vector<double>& inv_freq, int64_t p);

/// The M-RoPE axis (0 T, 1 H, 2 W) of each frequency pair, from the layouts' definitions in docs/ops/rope.md
/// (HF `apply_interleaved_mrope` for interleaved, FlagGems' GLM axis map for interleaved_glm).
std::vector<int> mrope_axes(MropeLayout layout, const std::array<int64_t, 3>& section, int64_t pairs);

/// Rotates the first 2 * cos.size() elements of x (one head) by the given angles: NeoX pairs (j, j + h) or GPT-J
/// pairs (2j, 2j + 1); inverse rotates by -theta. y and sens get x.size() entries; entries past the rotary part
/// are x itself with sensitivity 0.
void rope_head(const std::vector<double>& x, const std::vector<double>& cos, const std::vector<double>& sin,
               bool is_neox, bool inverse, std::vector<double>& y, std::vector<double>& sens);

}  // namespace fuseops::reference
