// fuseops public API: MoE routing — top-k selection of experts per token and the block schedule of the fused-MoE
// GEMM.
//
// Semantics (docs/ops/moe.md):
//  - topk_softmax follows vLLM `topk_softmax` (csrc/moe/topk_softmax_kernels.cu): softmax in fp32, selection on
//    the probabilities plus an optional correction_bias (selection only), weights = the unbiased probabilities,
//    sorted by selection score descending, optional renormalisation, k-major token_expert_indices j*T + t.
//  - grouped_topk follows DeepSeek-V3 `inference/model.py` / vLLM `grouped_topk` (noaux_tc): sigmoid or softmax
//    scores, group score = sum of the top two biased scores of the group (max score without a bias), the best
//    topk_group groups survive, top-k of the survivors on the biased scores, weights = unbiased scores,
//    renormalised, then multiplied by routed_scaling_factor.
//  - moe_align_block_size follows vLLM `moe_align_block_size` (csrc/moe/moe_align_sum_kernels.cu) with the
//    expert_map filtering of vLLM PR #29642; beyond it, the order of the tokens inside each expert region is
//    always ascending flat index (deterministic), and any num_experts up to 4096 is served.
//  - moe_route = one of the two selections followed by moe_align_block_size, with identical results.
//
// Selection rules shared by every router here (docs/ops/moe.md):
//  - a NaN logit (or bias) and -inf become -FLT_MAX, +inf becomes FLT_MAX, so scores are always finite (NaN, -inf
//    and -FLT_MAX tie): a softmax row whose logits are all NaN / -inf is uniform (ids 0..k-1 win the ties);
//  - ties are broken towards the lower expert (and group) index; ids are never duplicated or out of range;
//  - with renormalize, a row whose selected weights sum to 0 gets weights 1/k.
//  - without a bias, selection is made on the logits (the scores are monotone in them), so it is exact.
// Determinism: every output is bitwise identical across runs and a token's row does not depend on other tokens.
//
// Common rules: dims T (tokens), E (experts), k (topk). T = 0 is valid (nothing but num_tokens_post_pad and
// the schedule padding is written). Tensors live on one device (CPU or one CUDA device); the work runs there, on
// `stream`, without host synchronisation (capturable in CUDA graphs). Row-strided 2-D views are accepted (innermost
// stride 1). Outputs must not overlap inputs or each other.
// Errors: fuseops::Error (kind invalid_argument) naming the argument for any violation of the documented shapes,
// dtypes, ranges and layouts; kind unsupported for a CUDA tensor in a build without CUDA. Bad values that live on
// the device (expert ids) are recorded in the device error record (fuseops::check_errors()).
#pragma once

#include <cstdint>

#include "fuseops/tensor.h"

namespace fuseops {

/// Largest number of experts of the routers (topk_softmax, grouped_topk, moe_route).
constexpr int64_t kMaxRouterExperts = 1024;
/// Largest topk of the routers.
constexpr int64_t kMaxRouterTopk = 32;
/// Largest num_experts of moe_align_block_size.
constexpr int64_t kMaxAlignExperts = 4096;

/// Score function of a router: softmax over the experts of a token, or an independent sigmoid per expert.
enum class MoeScoring : int { softmax = 0, sigmoid = 1 };

/// topk_weights[t, j] (f32), topk_ids[t, j] (i32 | i64), token_expert_indices[t, j] = j*T + t (i32), all [T, k],
/// from gating_output [T, E] (f32 | f16 | bf16). correction_bias: [E] (f32 | f16 | bf16, whatever gating_output's, converted to fp32) or
/// nullptr; it is added to the probabilities for selection only. 1 <= E <= 1024, 1 <= k <= min(E, 32).
/// As vLLM `topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize, bias)`.
void topk_softmax(TensorView topk_weights, TensorView topk_ids, TensorView token_expert_indices,
                  TensorView gating_output, bool renormalize, const TensorView* correction_bias = nullptr,
                  Stream stream = {});

/// Grouped top-k routing (DeepSeek-V3 / R1 noaux_tc, Kimi-K2 with n_group = 1): topk_weights [T, k] f32 and
/// topk_ids [T, k] i32 | i64 from scores [T, E] (f32 | f16 | bf16 logits), bias [E] (f32 | f16 | bf16, whatever the
/// scores', converted to fp32) or nullptr. E % n_group == 0, 1 <= n_group <= 32, 1 <= topk_group <= n_group,
/// 1 <= k <= min(32, topk_group * E / n_group), E <= 1024. routed_scaling_factor is used in fp32: it must be finite
/// there and not a nonzero value that rounds to 0 there (Error naming it).
/// As vLLM `grouped_topk(scores, n_group, topk_group, topk, renormalize, routed_scaling_factor, bias, scoring)`
/// (the bias may have any of the three float dtypes here; vLLM requires the scores' dtype).
/// `scoring` defaults to MoeScoring::sigmoid: DeepSeek-V3 / R1 noaux_tc, as vLLM runs its fused kernel
/// (vllm/_custom_ops.py `grouped_topk`, torch.ops._moe_C.grouped_topk) for them with scoring_func = 1 (that op's own
/// default 0 takes scores already activated, which is not offered here). MoeRouterConfig::scoring (moe_route) defaults
/// to softmax instead, as vLLM's Python router function `grouped_topk(..., scoring_func="softmax")` does
/// (vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py): a DeepSeek-V2 style softmax router must pass
/// MoeScoring::softmax here.
void grouped_topk(TensorView topk_weights, TensorView topk_ids, TensorView scores, const TensorView* bias,
                  int64_t n_group, int64_t topk_group, bool renormalize, double routed_scaling_factor,
                  MoeScoring scoring = MoeScoring::sigmoid, Stream stream = {});

/// Lengths of the outputs of moe_align_block_size, as vLLM's Python wrapper computes them:
/// sorted_len = numel + num_experts * (block_size - 1), rounded up to a multiple of block_size when
/// pad_sorted_ids, and capped at numel * block_size when numel < num_experts; blocks = ceil(sorted_len / block_size).
struct MoeAlignSizes {
  int64_t sorted_len = 0;
  int64_t blocks = 0;
};
/// Error (invalid_argument) naming the argument for numel < 0, num_experts < 1, block_size < 1, or a length that does
/// not fit in int64, named as the schedule's limits are (moe_align_block_size): where numel < num_experts (length
/// numel * block_size) the larger of numel and block_size; else the larger term of the sum, numel or the padding, and
/// of the padding the larger of num_experts and block_size - 1.
MoeAlignSizes moe_align_sizes(int64_t numel, int64_t num_experts, int64_t block_size, bool pad_sorted_ids = false);

/// The block schedule of the fused-MoE GEMM for topk_ids [T, k] (i32 | i64; numel = T*k):
///  - sorted_token_ids [S] i32, S >= moe_align_sizes(numel, num_experts, block_size).sorted_len: the region of
///    expert e starts at the sum of the earlier experts' counts rounded up to block_size and lists the flat indices
///    routed to e in ascending order, then padding; every other entry (padding, tail) is numel;
///  - expert_ids [B] i32, B >= ceil(S / block_size): the expert of each block before num_tokens_post_pad, -1 after;
///  - num_tokens_post_pad [1] i32: the end of the last region (a multiple of block_size).
/// expert_map: [num_experts] i32 global id -> local id in [0, num_experts) or -1 (not on this rank), or nullptr.
/// Ids -1 are padding and skipped; ids < -1 or >= num_experts (and map entries outside [-1, num_experts)) are
/// skipped and recorded in the device error record (argument topk_ids / expert_map, index = flat index / global id).
/// 1 <= num_experts <= 4096, 1 <= block_size <= 2^20. The schedule is int32: sorted_len (as above, without the
/// round-up) must be < 2^31 (Error named as in moe_align_sizes, topk_ids for numel), and S < 2^31 (naming
/// sorted_token_ids). As vLLM `moe_align_block_size` with the map applied in the kernel (vLLM PR #29642); blocks
/// past the end are -1 as in newer vLLM and FlagGems.
void moe_align_block_size(TensorView sorted_token_ids, TensorView expert_ids, TensorView num_tokens_post_pad,
                          TensorView topk_ids, int64_t num_experts, int64_t block_size,
                          const TensorView* expert_map = nullptr, Stream stream = {});

/// Router settings of moe_route. softmax without groups (n_group = topk_group = 1, routed_scaling_factor = 1) is
/// topk_softmax; anything else is grouped_topk with these arguments.
struct MoeRouterConfig {
  /// Defaults to softmax (vLLM's Python router function `grouped_topk(..., scoring_func="softmax")` and
  /// GroupedTopKRouter), unlike grouped_topk's `scoring`, which defaults to sigmoid: DeepSeek-V3 / R1 through moe_route
  /// must set MoeScoring::sigmoid.
  MoeScoring scoring = MoeScoring::softmax;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool renormalize = false;
  double routed_scaling_factor = 1.0;
};

/// Fused router: topk_weights, topk_ids (i32 | i64) as grouped_topk(config) of gating_output (with topk_softmax's
/// and grouped_topk's rules), then the schedule of moe_align_block_size(topk_ids, E, block_size) without an
/// expert map (num_experts = E). Results are identical to calling the parts; fewer kernel launches.
void moe_route(TensorView topk_weights, TensorView topk_ids, TensorView sorted_token_ids, TensorView expert_ids,
               TensorView num_tokens_post_pad, TensorView gating_output, const TensorView* bias,
               const MoeRouterConfig& config, int64_t block_size, Stream stream = {});

}  // namespace fuseops
