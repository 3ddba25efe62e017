// Golden of the MoE routing ops: the routers in float64 (scores, selection by sorting, weights) and the block
// schedule as exact integers (a stable sort of the flat indices by expert), written independently of both
// backends' algorithms; plus the comparison of a backend's outputs with them (docs/ops/moe.md, "Tolerances").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuseops/moe.h"
#include "testing/host_tensor.h"

namespace fuseops::reference {

struct RouterSpec {
  MoeScoring scoring = MoeScoring::softmax;
  int64_t n_group = 1, topk_group = 1, k = 1;
  bool renormalize = false;
  double scale = 1.0;  ///< routed_scaling_factor (as the backends see it: rounded to fp32)
};

struct RouteGolden {
  int64_t T = 0, E = 0, k = 0, n_group = 1, topk_group = 1;
  bool has_bias = false, renormalize = false, softmax = true;
  double scale = 1.0;
  std::vector<double> logit;        ///< [T, E] sanitized logits
  std::vector<double> score;        ///< [T, E] softmax / sigmoid scores
  std::vector<double> key;          ///< [T, E] selection key: score + bias, or the logit without a bias
  std::vector<double> group_score;  ///< [T, n_group]
  std::vector<char> kept;           ///< [T, n_group] surviving groups
  std::vector<int64_t> ids;         ///< [T, k]
  std::vector<double> weights;      ///< [T, k]
};

/// logits: [T, E] (any float dtype), bias: [E] or nullptr.
RouteGolden route(const testing::HostTensor& logits, const testing::HostTensor* bias, const RouterSpec& spec);

struct AlignGolden {
  std::vector<int32_t> sorted;      ///< [sorted_len]
  std::vector<int32_t> expert_ids;  ///< [blocks]
  int32_t total = 0;
  int64_t first_bad_id = -1;        ///< flat index of the first id < -1 or >= E (recorded by the backends)
  int64_t first_bad_map = -1;       ///< smallest global id whose map entry is < -1 or >= E and is used
};

/// ids: [T, k] i32 | i64; expert_map: [E] i32 or nullptr.
AlignGolden align(const testing::HostTensor& ids, int64_t num_experts, int64_t block_size, int64_t sorted_len,
                  int64_t blocks, const testing::HostTensor* expert_map);

/// Outcome of comparing a backend's outputs with a golden.
struct MoeComparison {
  bool pass = true;
  int64_t violations = 0;
  double max_abs_error = 0;  ///< weights
  double rel_rms_error = 0;  ///< weights
  std::string detail;        ///< the first violation
  std::string tolerance;     ///< the bounds, in words
};

/// Checks topk_weights / topk_ids ([T, k], host) against the golden: distinct ids in range from surviving groups,
/// the golden's ids in order except where the golden's keys of the two ids differ by a rounding-size amount
/// (never for equal keys: ties go to the lower index), weights within the derived bound of the golden weights of
/// the returned ids. token_expert_indices is checked when given (exactly).
MoeComparison compare_route(const RouteGolden& g, const testing::HostTensor& weights, const testing::HostTensor& ids,
                            const testing::HostTensor* src_rows = nullptr);

/// Checks a schedule exactly (sorted_token_ids, expert_ids, num_tokens_post_pad).
MoeComparison compare_align(const AlignGolden& g, const testing::HostTensor& sorted,
                            const testing::HostTensor& expert_ids, const testing::HostTensor& total);

}  // namespace fuseops::reference
