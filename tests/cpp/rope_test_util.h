// Helpers of the rotary-embedding tests: a RopeSpec from its main dimensions, and the M-RoPE layouts every sweep
// covers.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "fuseops/rope.h"
#include "testing/rope_problem.h"

namespace fuseops_test {

/// A spec of `op` with q / k and cache in `dtype`, T tokens, Hq / Hk heads of head size d, rotary_dim r.
inline fuseops::testing::RopeSpec rope_spec(fuseops::testing::RopeOp op, fuseops::DType dtype, bool neox, int64_t T,
                                            int64_t hq, int64_t hk, int64_t d, int64_t r) {
  fuseops::testing::RopeSpec s;
  s.op = op;
  s.dtype = dtype;
  s.cache_dtype = dtype;
  s.is_neox = neox;
  s.tokens = T;
  s.q_heads = hq;
  s.k_heads = hk;
  s.head_size = d;
  s.rotary_dim = r;
  return s;
}

struct MropeLayoutCase {
  fuseops::MropeLayout layout;
  std::array<int64_t, 3> section;
  int64_t head_size, rotary_dim;
};

/// The three layouts with their models' sections ([16,24,24] Qwen2.5-VL, [24,20,20] Qwen3-VL, [8,12,12] GLM-4.1V),
/// and crossings: interleaved with [16,24,24] (the formula, not the counts), a chunked section boundary inside a
/// 16-byte lane ([24,20,20]: pair 44), chunked partial rotary, the GLM map at full rotary.
inline std::vector<MropeLayoutCase> mrope_layout_cases() {
  using fuseops::MropeLayout;
  return {{MropeLayout::chunked, {16, 24, 24}, 128, 128},     {MropeLayout::interleaved, {24, 20, 20}, 128, 128},
          {MropeLayout::interleaved_glm, {8, 12, 12}, 128, 64}, {MropeLayout::interleaved, {16, 24, 24}, 128, 128},
          {MropeLayout::chunked, {24, 20, 20}, 128, 128},     {MropeLayout::chunked, {8, 12, 12}, 96, 64},
          {MropeLayout::interleaved_glm, {24, 20, 20}, 128, 128}};
}

/// One mrope spec per layout case: T tokens, Hq / Hk heads, NeoX or GPT-J.
inline std::vector<fuseops::testing::RopeSpec> mrope_layout_specs(fuseops::DType dtype, bool neox, int64_t T,
                                                                  int64_t hq, int64_t hk) {
  std::vector<fuseops::testing::RopeSpec> v;
  for (const MropeLayoutCase& l : mrope_layout_cases()) {
    v.push_back(rope_spec(fuseops::testing::RopeOp::mrope, dtype, neox, T, hq, hk, l.head_size, l.rotary_dim));
    v.back().layout = l.layout;
    v.back().section = l.section;
  }
  return v;
}

}  // namespace fuseops_test
