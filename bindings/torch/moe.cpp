// torch kernels of the MoE routing ops: convert, guard, current stream, call (include/fuseops/moe.h).
#include <string>

#include "fuseops/moe.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {
namespace {

MoeScoring parse_scoring(const char* op, c10::string_view scoring) {
  if (scoring == "softmax") return MoeScoring::softmax;
  if (scoring == "sigmoid") return MoeScoring::sigmoid;
  rethrow(Error(ErrorKind::invalid_argument, std::string(op) + ": scoring: expected \"softmax\" | \"sigmoid\", got " +
                                                 quoted_text(std::string_view(scoring.data(), scoring.size()))));
}

}  // namespace

void topk_softmax(at::Tensor& topk_weights, at::Tensor& topk_ids, at::Tensor& token_expert_indices,
                  const at::Tensor& gating_output, bool renormalize, const c10::optional<at::Tensor>& correction_bias) {
  constexpr const char* op = "topk_softmax";
  Written written;
  const TensorView g = to_view(op, "gating_output", gating_output);
  const OptionalView b(op, "correction_bias", correction_bias);
  const TensorView w = written.add(op, "topk_weights", topk_weights), i = written.add(op, "topk_ids", topk_ids);
  const TensorView s = written.add(op, "token_expert_indices", token_expert_indices);
  run_on_device_of(topk_weights, written,
                   [&](Stream st) { fuseops::topk_softmax(w, i, s, g, renormalize, b.get(), st); });
}

void grouped_topk(at::Tensor& topk_weights, at::Tensor& topk_ids, const at::Tensor& scores,
                  const c10::optional<at::Tensor>& bias, int64_t n_group, int64_t topk_group, bool renormalize,
                  double routed_scaling_factor, c10::string_view scoring) {
  constexpr const char* op = "grouped_topk";
  Written written;
  const MoeScoring sc = parse_scoring(op, scoring);
  const TensorView x = to_view(op, "scores", scores);
  const OptionalView b(op, "bias", bias);
  const TensorView w = written.add(op, "topk_weights", topk_weights), i = written.add(op, "topk_ids", topk_ids);
  run_on_device_of(topk_weights, written, [&](Stream st) {
    fuseops::grouped_topk(w, i, x, b.get(), n_group, topk_group, renormalize, routed_scaling_factor, sc, st);
  });
}

void moe_align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_size,
                          at::Tensor& sorted_token_ids, at::Tensor& expert_ids, at::Tensor& num_tokens_post_pad,
                          const c10::optional<at::Tensor>& expert_map) {
  constexpr const char* op = "moe_align_block_size";
  Written written;
  const TensorView ids = to_view(op, "topk_ids", topk_ids);
  const OptionalView m(op, "expert_map", expert_map);
  const TensorView s = written.add(op, "sorted_token_ids", sorted_token_ids),
                   e = written.add(op, "expert_ids", expert_ids);
  const TensorView t = written.add(op, "num_tokens_post_pad", num_tokens_post_pad);
  run_on_device_of(sorted_token_ids, written, [&](Stream st) {
    fuseops::moe_align_block_size(s, e, t, ids, num_experts, block_size, m.get(), st);
  });
}

void moe_route(at::Tensor& topk_weights, at::Tensor& topk_ids, at::Tensor& sorted_token_ids, at::Tensor& expert_ids,
               at::Tensor& num_tokens_post_pad, const at::Tensor& gating_output, const c10::optional<at::Tensor>& bias,
               c10::string_view scoring, int64_t n_group, int64_t topk_group, bool renormalize,
               double routed_scaling_factor, int64_t block_size) {
  constexpr const char* op = "moe_route";
  Written written;
  MoeRouterConfig c;
  c.scoring = parse_scoring(op, scoring);
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.renormalize = renormalize;
  c.routed_scaling_factor = routed_scaling_factor;
  const TensorView g = to_view(op, "gating_output", gating_output);
  const OptionalView b(op, "bias", bias);
  const TensorView w = written.add(op, "topk_weights", topk_weights), i = written.add(op, "topk_ids", topk_ids);
  const TensorView s = written.add(op, "sorted_token_ids", sorted_token_ids),
                   e = written.add(op, "expert_ids", expert_ids);
  const TensorView t = written.add(op, "num_tokens_post_pad", num_tokens_post_pad);
  run_on_device_of(topk_weights, written,
                   [&](Stream st) { fuseops::moe_route(w, i, s, e, t, g, b.get(), c, block_size, st); });
}

}  // namespace fuseops::torch_binding
