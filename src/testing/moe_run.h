// MoE routing problems for the tests and the command line: random inputs (with the adversarial rows the ops define),
// a run of one op on the CPU or a CUDA device with poisoned outputs, and the comparison with the golden.
#pragma once

#include <cstdint>
#include <string>

#include "fuseops/moe.h"
#include "reference/moe.h"
#include "testing/host_tensor.h"

namespace fuseops::testing {

enum class RouteOp { topk_softmax, grouped_topk, moe_route };
const char* route_op_name(RouteOp op);

struct RouteProblem {
  RouteOp op = RouteOp::topk_softmax;
  DType dtype = DType::bf16;          ///< logits
  int64_t T = 1, E = 8, k = 2;
  reference::RouterSpec spec;         ///< spec.k is set from k
  bool bias = false;
  DType bias_dtype = DType::f32;
  DType ids_dtype = DType::i32;
  int64_t block_size = 64;            ///< moe_route
  int64_t row_pitch = 0;              ///< logits row pitch (0: E)
  bool special_rows = false;          ///< first rows: all NaN, all equal, +-inf and NaN mixed, coarse ties
  std::string describe() const;
};

/// Logits [T, E] (N(0, 2) rounded to the dtype; special rows first when asked) and the bias [E] (N(0, 0.5)).
HostTensor make_logits(const RouteProblem& p, uint64_t seed);
HostTensor make_bias(const RouteProblem& p, uint64_t seed);

struct RouteOutputs {
  HostTensor weights, ids, src_rows, sorted, expert_ids, total;
};

/// Runs the problem's op on `device` with poisoned outputs and returns them on the host.
RouteOutputs run_route(const RouteProblem& p, const HostTensor& logits, const HostTensor* bias, Device device);

/// Runs and compares with the golden (for moe_route also the schedule of the returned ids, exactly).
reference::MoeComparison check_route(const RouteProblem& p, Device device, uint64_t seed);

struct AlignProblem {
  int64_t T = 1, k = 8, E = 64, block_size = 64;
  bool pad_sorted_ids = false;
  DType ids_dtype = DType::i32;
  double padding_fraction = 0;  ///< share of ids set to -1
  bool expert_map = false;      ///< a map sending a third of the experts to -1 and the rest to a permutation
  bool skewed = false;          ///< most ids on a few experts
  int64_t ids_pitch = 0;        ///< row stride of topk_ids (0: k, contiguous); the gaps hold expert E - 1
  /// sorted_token_ids and expert_ids start this many elements into buffers with `out_offset` poisoned words before
  /// and 5 after them (unaligned outputs); run_align returns only the views, and records in `guards_intact`
  /// whether the words around them are still poisoned.
  int64_t out_offset = 0;
  std::string describe() const;
};

HostTensor make_ids(const AlignProblem& p, uint64_t seed);
/// Sets flat element i (row i / cols, column i % cols) of an i32 or i64 ids tensor to v.
void put_id(HostTensor& t, int64_t i, int64_t v);
HostTensor make_expert_map(const AlignProblem& p, uint64_t seed);

struct AlignOutputs {
  HostTensor sorted, expert_ids, total;
  bool guards_intact = true;  ///< the words around the outputs (AlignProblem::out_offset) kept their poison
};

/// Runs moe_align_block_size on `device` with poisoned outputs of moe_align_sizes(..., pad_sorted_ids).
AlignOutputs run_align(const AlignProblem& p, const HostTensor& ids, const HostTensor* expert_map, Device device);

reference::MoeComparison check_align(const AlignProblem& p, Device device, uint64_t seed);

}  // namespace fuseops::testing
