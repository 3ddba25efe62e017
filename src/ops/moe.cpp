// MoE routing: validation (once, for every backend) and dispatch.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/moe_math.h"
#include "core/dispatch.h"
#include "cuda/device_error.h"
#include "ops/moe_impl.h"

namespace fuseops {
namespace detail {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16};
constexpr std::initializer_list<DType> kIdTypes = {DType::i32, DType::i64};

std::string dims2(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

/// A rank-2 [rows, cols] matrix with the given shape (cols < 0: any), as a RowMatrix.
RowMatrix matrix(const char* op, const char* name, const TensorView& v, const char* dims, int64_t rows,
                 int64_t cols) {
  if (v.rank != 2 || (rows >= 0 && v.shape[0] != rows) || (cols >= 0 && v.shape[1] != cols)) {
    std::string expected = std::string(v.rank != 2 ? "rank 2 " : "shape ") + dims;  // the rank, else the sizes
    if (rows >= 0 && cols >= 0) expected += " = " + dims2(rows, cols);
    else if (rows >= 0) expected += " with " + std::to_string(rows) + " rows";
    fail_argument(op, name, expected, v.shape_str());
  }
  return as_row_matrix(op, name, v);
}

/// A rank-1 [n] vector (n < 0: any length, n_min: smallest length).
StridedVec vector(const char* op, const char* name, const TensorView& v, const char* dims, int64_t n,
                  int64_t n_min = 0) {
  if (v.rank != 1 || (n >= 0 && v.shape[0] != n) || v.shape[0] < n_min) {
    std::string expected = std::string(v.rank != 1 ? "rank 1 " : "shape ") + dims;
    if (n >= 0) expected += " = [" + std::to_string(n) + "]";
    if (n_min > 0) expected += " (at least " + std::to_string(n_min) + " elements)";
    fail_argument(op, name, expected, v.shape_str());
  }
  return StridedVec{v.data, v.shape[0], v.strides[0], v.dtype};
}

int32_t* contiguous_i32(const char* op, const char* name, const TensorView& v) {
  check_dtype(op, name, v, {DType::i32});
  if (v.shape[0] > 1 && v.strides[0] != 1) {
    fail_argument(op, name, "a contiguous vector", "stride " + std::to_string(v.strides[0]));
  }
  return static_cast<int32_t*>(v.data);
}

/// Shared checks of the routers; fills everything of `a` but the config. Returns the device. `bias_name`: the
/// op's name of its bias argument.
Device check_route(const char* op, TensorView& weights, TensorView& ids, const TensorView* src_rows,
                   const TensorView& logits, const char* logits_name, const TensorView* bias, const char* bias_name,
                   RouteArgs& a) {
  // each view's own fields first (rank, dims, strides, span): the shapes are compared with T, E and k taken from
  // logits and topk_weights, so a malformed one must be named before another is measured against it
  check_layouts(op, {{logits_name, &logits}, {"topk_weights", &weights}, {"topk_ids", &ids},
                     {"token_expert_indices", src_rows}, {bias_name, bias}});
  check_dtype(op, logits_name, logits, kFloatTypes);
  check_dtype(op, "topk_weights", weights, {DType::f32});
  check_dtype(op, "topk_ids", ids, kIdTypes);
  a.logits = matrix(op, logits_name, logits, "[T, E]", -1, -1);
  a.T = a.logits.rows;
  a.E = logits.shape[1];
  if (a.E < 1 || a.E > kMaxRouterExperts) {
    fail_argument(op, logits_name, "E in [1, " + std::to_string(kMaxRouterExperts) + "]",
                  std::to_string(a.E) + " in " + logits.shape_str());
  }
  if (weights.rank != 2) fail_argument(op, "topk_weights", "rank 2 [T, k]", weights.shape_str());
  a.k = weights.shape[1];
  if (a.k < 1 || a.k > std::min(a.E, kMaxRouterTopk)) {
    fail_argument(op, "topk_weights", "k in [1, min(E, 32)] = [1, " + std::to_string(std::min(a.E, kMaxRouterTopk)) + "]",
                  std::to_string(a.k) + " in " + weights.shape_str());
  }
  // where a shape is wrong, the rule says which argument gave T and k (the odd one out may be either)
  const std::string t_of = std::string("[T, k] (T of ") + logits_name + ")";
  const std::string tk_of = std::string("[T, k] (T of ") + logits_name + ", k of topk_weights)";
  a.weights = matrix(op, "topk_weights", weights, t_of.c_str(), a.T, a.k);
  a.ids = matrix(op, "topk_ids", ids, tk_of.c_str(), a.T, a.k);
  std::vector<NamedView> views = {{"topk_weights", &weights}, {"topk_ids", &ids}, {logits_name, &logits}};
  if (src_rows) {
    check_dtype(op, "token_expert_indices", *src_rows, {DType::i32});
    a.src_rows = matrix(op, "token_expert_indices", *src_rows, tk_of.c_str(), a.T, a.k);
    views.push_back({"token_expert_indices", src_rows});
  }
  if (bias) {
    check_dtype(op, bias_name, *bias, kFloatTypes);
    a.bias = vector(op, bias_name, *bias, "[E]", a.E);
    views.push_back({bias_name, bias});
  }
  Device device = Device::cpu();
  // common_device takes an initializer list; check pairwise against the first view.
  for (const NamedView& v : views) {
    const Device d = common_device(op, {{views[0].name, views[0].view}, {v.name, v.view}});
    device = d;
  }
  if (a.T > std::numeric_limits<int32_t>::max() / a.k) {
    fail_argument(op, logits_name,
                  "T * k < 2^31 (one limit of every router: topk_softmax's token_expert_indices and moe_route's "
                  "schedule hold such indices in int32)",
                  std::to_string(a.T) + " * " + std::to_string(a.k));
  }
  check_no_overlap(op, "topk_weights", a.weights, "topk_ids", a.ids);
  check_no_overlap(op, "topk_weights", a.weights, logits_name, a.logits);
  check_no_overlap(op, "topk_ids", a.ids, logits_name, a.logits);
  if (src_rows) {
    check_no_overlap(op, "token_expert_indices", a.src_rows, "topk_weights", a.weights);
    check_no_overlap(op, "token_expert_indices", a.src_rows, "topk_ids", a.ids);
    check_no_overlap(op, "token_expert_indices", a.src_rows, logits_name, a.logits);
  }
  if (bias) {
    check_disjoint(op, "topk_weights", weights, bias_name, *bias);
    check_disjoint(op, "topk_ids", ids, bias_name, *bias);
    if (src_rows) check_disjoint(op, "token_expert_indices", *src_rows, bias_name, *bias);
  }
  return device;
}

void check_groups(const char* op, RouteArgs& a, int64_t n_group, int64_t topk_group, double scale) {
  if (n_group < 1 || n_group > 32 || a.E % n_group != 0) {
    fail_argument(op, "n_group", "a divisor of E = " + std::to_string(a.E) + " in [1, 32]", std::to_string(n_group));
  }
  if (topk_group < 1 || topk_group > n_group) {
    fail_argument(op, "topk_group", "in [1, n_group] = [1, " + std::to_string(n_group) + "]",
                  std::to_string(topk_group));
  }
  const int64_t candidates = topk_group * (a.E / n_group);
  if (a.k > candidates) {
    fail_argument(op, "topk_weights", "k = shape[1] <= topk_group * E / n_group = " + std::to_string(candidates),
                  "k = " + std::to_string(a.k));
  }
  a.n_group = static_cast<int>(n_group);
  a.topk_group = static_cast<int>(topk_group);
  a.scale = fp32_argument(op, "routed_scaling_factor", scale);
}

void check_scoring(const char* op, MoeScoring scoring) {
  if (scoring != MoeScoring::softmax && scoring != MoeScoring::sigmoid) {
    fail_argument(op, "scoring", "softmax | sigmoid", "code " + std::to_string(static_cast<int>(scoring)));
  }
}

/// The argument moe_schedule_blame names, with its value as the message shows it (`ids`: the ids' name and text).
struct Blamed {
  const char* name;
  std::string got;
};
Blamed moe_schedule_blamed(int64_t numel, int64_t num_experts, int64_t block_size, const Blamed& ids) {
  switch (moe_schedule_blame(numel, num_experts, block_size)) {
    case MoeScheduleBlame::block_size: return {"block_size", std::to_string(block_size)};
    case MoeScheduleBlame::num_experts: return {"num_experts", std::to_string(num_experts)};
    default: return ids;
  }
}

/// What the messages expect of the schedule's length, below `limit` ("2^31", "2^63").
std::string moe_schedule_expected(int64_t numel, int64_t num_experts, int64_t block_size, bool pad_sorted_ids,
                                  const char* limit) {
  return std::string("a schedule length (numel + num_experts * (block_size - 1)") +
         (pad_sorted_ids ? ", rounded up to block_size (pad_sorted_ids)" : "") +
         "; numel * block_size where numel < num_experts) < " + limit + " (numel " + std::to_string(numel) +
         ", num_experts " + std::to_string(num_experts) + ", block_size " + std::to_string(block_size) + ")";
}

/// Shared checks of moe_align_block_size and the schedule half of moe_route; `ids_view` is validated by the
/// caller (dtype, shape, device).
Device check_align(const char* op, TensorView& sorted, TensorView& expert_ids, TensorView& total,
                   const TensorView& ids_view, int64_t num_experts, int64_t block_size, const TensorView* expert_map,
                   AlignArgs& a) {
  if (num_experts < 1 || num_experts > kMaxAlignExperts) {
    fail_argument(op, "num_experts", "in [1, " + std::to_string(kMaxAlignExperts) + "]", std::to_string(num_experts));
  }
  if (block_size < 1 || block_size > (int64_t{1} << 20)) {
    fail_argument(op, "block_size", "in [1, 2^20]", std::to_string(block_size));
  }
  // each view's own fields first: the schedule's lengths come from topk_ids' dims (a negative or huge one would be
  // reported against sorted_token_ids or as a size overflow)
  check_layouts(op, {{"topk_ids", &ids_view}, {"sorted_token_ids", &sorted}, {"expert_ids", &expert_ids},
                     {"num_tokens_post_pad", &total}, {"expert_map", expert_map}});
  check_dtype(op, "topk_ids", ids_view, kIdTypes);
  a.ids = matrix(op, "topk_ids", ids_view, "[T, k]", -1, -1);
  const int64_t numel = a.ids.rows * a.ids.cols;
  const MoeAlignSizes need = moe_align_sizes(numel, num_experts, block_size);
  if (need.sorted_len > std::numeric_limits<int32_t>::max()) {  // the int32 schedule
    const Blamed b = moe_schedule_blamed(numel, num_experts, block_size, {"topk_ids", ids_view.shape_str()});
    fail_argument(op, b.name,
                  moe_schedule_expected(numel, num_experts, block_size, false, "2^31") + ", which is " +
                      std::to_string(need.sorted_len) + " (an int32 schedule)",
                  b.got);
  }
  const StridedVec s = vector(op, "sorted_token_ids", sorted, "[S]", -1, need.sorted_len);
  a.sorted = contiguous_i32(op, "sorted_token_ids", sorted);
  a.sorted_len = s.size;
  if (a.sorted_len > std::numeric_limits<int32_t>::max()) {
    fail_argument(op, "sorted_token_ids", "fewer than 2^31 elements", sorted.shape_str());
  }
  const int64_t min_blocks = (a.sorted_len + block_size - 1) / block_size;
  a.blocks = vector(op, "expert_ids", expert_ids, "[B] with B >= ceil(S / block_size)", -1, min_blocks).size;
  a.expert_ids = contiguous_i32(op, "expert_ids", expert_ids);
  vector(op, "num_tokens_post_pad", total, "[1]", 1);
  a.total = contiguous_i32(op, "num_tokens_post_pad", total);
  std::vector<NamedView> views = {{"topk_ids", &ids_view},
                                  {"sorted_token_ids", &sorted},
                                  {"expert_ids", &expert_ids},
                                  {"num_tokens_post_pad", &total}};
  if (expert_map) {
    check_dtype(op, "expert_map", *expert_map, {DType::i32});
    a.expert_map = vector(op, "expert_map", *expert_map, "[num_experts]", num_experts);
    views.push_back({"expert_map", expert_map});
    a.map_site = error_site(op, "expert_map",
                            "the index is the global expert id whose entry was read: expected -1 (not local) or a "
                            "local id in [0, num_experts); its ids are skipped");
  }
  Device device = Device::cpu();
  for (const NamedView& v : views) device = common_device(op, {{views[0].name, views[0].view}, {v.name, v.view}});
  // outputs against inputs and each other; the two inputs (topk_ids, expert_map) may share memory, as in every op
  const auto input = [&](const NamedView& v) { return v.view == &ids_view || v.view == expert_map; };
  for (size_t i = 1; i < views.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!(input(views[i]) && input(views[j]))) {
        check_disjoint(op, views[i].name, *views[i].view, views[j].name, *views[j].view);
      }
    }
  }
  a.E = num_experts;
  a.block_size = block_size;
  // the ids' flat index, not their [T, k] shape: the Python functions pass ids of any rank as rows of it
  a.ids_site = error_site(op, "topk_ids",
                          "the index is the id's flat (row-major) index in topk_ids: expected -1 (padding) or an "
                          "expert id in [0, num_experts); it is skipped");
  return device;
}

void run_route(const char* op, const RouteArgs& a, const Device& device, Stream stream) {
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (a.T == 0) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::route(op, a, device.index, stream.handle);
#endif
  } else {
    cpu::route(a);
  }
  (void)stream;
}

}  // namespace
}  // namespace detail

MoeAlignSizes moe_align_sizes(int64_t numel, int64_t num_experts, int64_t block_size, bool pad_sorted_ids) {
  const char* op = "moe_align_sizes";
  if (numel < 0) detail::fail_argument(op, "numel", ">= 0", std::to_string(numel));
  if (num_experts < 1) detail::fail_argument(op, "num_experts", ">= 1", std::to_string(num_experts));
  if (block_size < 1) detail::fail_argument(op, "block_size", ">= 1", std::to_string(block_size));
  // sorted_len = numel * block_size where numel < num_experts (vLLM's cap: always the smaller there, and a multiple
  // of block_size), else numel + num_experts * (block_size - 1), rounded up to block_size (pad_sorted_ids): every
  // step must fit in int64.
  MoeAlignSizes s;
  bool overflow = false;
  if (numel < num_experts) {
    overflow = __builtin_mul_overflow(numel, block_size, &s.sorted_len);
  } else {
    int64_t pad = 0, len = 0;
    overflow = __builtin_mul_overflow(num_experts, block_size - 1, &pad) || __builtin_add_overflow(numel, pad, &len) ||
               (pad_sorted_ids && len > std::numeric_limits<int64_t>::max() - (block_size - 1));
    if (!overflow) s.sorted_len = pad_sorted_ids ? detail::moe_round_up(len, block_size) : len;
  }
  if (overflow) {
    const detail::Blamed b =
        detail::moe_schedule_blamed(numel, num_experts, block_size, {"numel", std::to_string(numel)});
    detail::fail_argument(op, b.name,
                          detail::moe_schedule_expected(numel, num_experts, block_size, pad_sorted_ids, "2^63"), b.got);
  }
  s.blocks = s.sorted_len / block_size + (s.sorted_len % block_size != 0);
  return s;
}

void topk_softmax(TensorView topk_weights, TensorView topk_ids, TensorView token_expert_indices,
                  TensorView gating_output, bool renormalize, const TensorView* correction_bias, Stream stream) {
  const char* op = "topk_softmax";
  detail::RouteArgs a;
  const Device device = detail::check_route(op, topk_weights, topk_ids, &token_expert_indices, gating_output,
                                            "gating_output", correction_bias, "correction_bias", a);
  a.scoring = MoeScoring::softmax;
  a.renormalize = renormalize;
  detail::run_route(op, a, device, stream);
}

void grouped_topk(TensorView topk_weights, TensorView topk_ids, TensorView scores, const TensorView* bias,
                  int64_t n_group, int64_t topk_group, bool renormalize, double routed_scaling_factor,
                  MoeScoring scoring, Stream stream) {
  const char* op = "grouped_topk";
  detail::check_scoring(op, scoring);
  detail::RouteArgs a;
  const Device device = detail::check_route(op, topk_weights, topk_ids, nullptr, scores, "scores", bias, "bias", a);
  detail::check_groups(op, a, n_group, topk_group, routed_scaling_factor);
  a.scoring = scoring;
  a.renormalize = renormalize;
  detail::run_route(op, a, device, stream);
}

void moe_align_block_size(TensorView sorted_token_ids, TensorView expert_ids, TensorView num_tokens_post_pad,
                          TensorView topk_ids, int64_t num_experts, int64_t block_size, const TensorView* expert_map,
                          Stream stream) {
  const char* op = "moe_align_block_size";
  detail::AlignArgs a;
  const Device device = detail::check_align(op, sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids,
                                            num_experts, block_size, expert_map, a);
  if (detail::backend_for(op, device) == detail::Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    detail::cuda::align(op, a, device.index, stream.handle);
#endif
  } else {
    detail::cpu::align(a);
  }
  (void)stream;
}

void moe_route(TensorView topk_weights, TensorView topk_ids, TensorView sorted_token_ids, TensorView expert_ids,
               TensorView num_tokens_post_pad, TensorView gating_output, const TensorView* bias,
               const MoeRouterConfig& config, int64_t block_size, Stream stream) {
  const char* op = "moe_route";
  detail::check_scoring(op, config.scoring);
  detail::RouteArgs r;
  const Device device =
      detail::check_route(op, topk_weights, topk_ids, nullptr, gating_output, "gating_output", bias, "bias", r);
  detail::check_groups(op, r, config.n_group, config.topk_group, config.routed_scaling_factor);
  r.scoring = config.scoring;
  r.renormalize = config.renormalize;
  detail::AlignArgs a;
  const Device d2 = detail::check_align(op, sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, r.E,
                                        block_size, nullptr, a);
  if (d2 != device) {
    detail::fail_argument(op, "sorted_token_ids", "device " + device_name(device), device_name(d2));
  }
  const TensorView* outs[] = {&sorted_token_ids, &expert_ids, &num_tokens_post_pad};
  const char* out_names[] = {"sorted_token_ids", "expert_ids", "num_tokens_post_pad"};
  for (int i = 0; i < 3; ++i) {
    detail::check_disjoint(op, out_names[i], *outs[i], "topk_weights", topk_weights);
    detail::check_disjoint(op, out_names[i], *outs[i], "gating_output", gating_output);
    if (bias) detail::check_disjoint(op, out_names[i], *outs[i], "bias", *bias);
  }
  if (detail::backend_for(op, device) == detail::Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    detail::cuda::route_and_align(op, r, a, device.index, stream.handle);
#endif
  } else {
    if (r.T > 0) detail::cpu::route(r);
    detail::cpu::align(a);
  }
  (void)stream;
}

}  // namespace fuseops
