// Case sets of the MoE routing ops: each real-model set gets its router (topk_softmax or grouped_topk), the schedule
// (moe_align_block_size, block_size 64, on the router's ids) and the fused router moe_route, whose baseline is its
// two parts launched back to back. Decode (1, 16, 64 tokens) and prefill (4096, 16384 tokens).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "cases.h"
#include "common/moe_math.h"
#include "fuseops/moe.h"
#include "gpu.h"
#include "testing/moe_run.h"

namespace fuseops::cli {
namespace {

using testing::AlignProblem;
using testing::RouteOp;
using testing::RouteProblem;

enum class Kind { router, align, route };

struct Spec {
  Kind kind;
  RouteProblem p;  ///< router settings (p.op: the router); T = tokens
};

RouteProblem with_tokens(RouteProblem p, int64_t T) {
  p.T = T;
  return p;
}

/// Device buffers of one set: logits, bias, weights, ids, and the schedule.
struct MoeBuffers {
  gpu::Buffer logits, bias, weights, ids, src, sorted, eids, total;
};

class MoeBench : public BenchProblem {
 public:
  explicit MoeBench(const Spec& s) : s_(s), sz_(moe_align_sizes(s.p.T * s.p.k, s.p.E, s.p.block_size)) {}
  std::size_t set_bytes() const override {
    return static_cast<std::size_t>(s_.p.T * s_.p.E * 2 + s_.p.E * 4 + s_.p.T * s_.p.k * 12 + sz_.sorted_len * 4 +
                                    sz_.blocks * 4 + 4);
  }
  double bytes() const override {
    const double route = static_cast<double>(s_.p.T * s_.p.E * 2 + (s_.p.bias ? s_.p.E * 4 : 0) +
                                             s_.p.T * s_.p.k * (s_.p.op == RouteOp::topk_softmax ? 12 : 8));
    const double align = static_cast<double>(s_.p.T * s_.p.k * 4 + (sz_.sorted_len + sz_.blocks + 1) * 4);
    return s_.kind == Kind::router ? route : s_.kind == Kind::align ? align : route + align - s_.p.T * s_.p.k * 4;
  }
  void allocate(int sets) override {
    for (int k = 0; k < sets; ++k) {
      MoeBuffers b;
      b.logits = gpu::Buffer(std::max<int64_t>(1, s_.p.T * s_.p.E) * 2);
      b.bias = gpu::Buffer(s_.p.E * 4);
      b.weights = gpu::Buffer(std::max<int64_t>(1, s_.p.T * s_.p.k) * 4);
      b.ids = gpu::Buffer(std::max<int64_t>(1, s_.p.T * s_.p.k) * 4);
      b.src = gpu::Buffer(std::max<int64_t>(1, s_.p.T * s_.p.k) * 4);
      b.sorted = gpu::Buffer(std::max<int64_t>(1, sz_.sorted_len) * 4);
      b.eids = gpu::Buffer(std::max<int64_t>(1, sz_.blocks) * 4);
      b.total = gpu::Buffer(4);
      gpu::fill_random(b.logits.get(), DType::bf16, s_.p.T * s_.p.E, 2000 + k, 2.0f);
      gpu::fill_random(b.bias.get(), DType::f32, s_.p.E, 3000 + k, 0.5f);
      sets_.push_back(std::move(b));
      run_router(k, nullptr);  // realistic ids for the schedule
    }
  }
  void run(int set, void* stream) override {
    if (s_.kind == Kind::router) run_router(set, stream);
    else if (s_.kind == Kind::align) run_align(set, stream);
    else run_fused(set, stream);
  }
  bool run_baseline(int set, void* stream) override {
    if (s_.kind != Kind::route) return false;
    run_router(set, stream);
    run_align(set, stream);
    return true;
  }

 private:
  TensorView mat(const gpu::Buffer& b, DType t, int64_t cols) const {
    return TensorView(b.get(), t, Device::cuda(0), {s_.p.T, cols});
  }
  TensorView vec(const gpu::Buffer& b, int64_t n) const { return TensorView(b.get(), DType::i32, Device::cuda(0), {n}); }
  void run_router(int set, void* stream) {
    const MoeBuffers& b = sets_[set];
    const TensorView bias(b.bias.get(), DType::f32, Device::cuda(0), {s_.p.E});
    const TensorView* bp = s_.p.bias ? &bias : nullptr;
    if (s_.p.op == RouteOp::topk_softmax) {
      topk_softmax(mat(b.weights, DType::f32, s_.p.k), mat(b.ids, DType::i32, s_.p.k), mat(b.src, DType::i32, s_.p.k),
                   mat(b.logits, DType::bf16, s_.p.E), s_.p.spec.renormalize, bp, Stream(stream));
    } else {
      grouped_topk(mat(b.weights, DType::f32, s_.p.k), mat(b.ids, DType::i32, s_.p.k), mat(b.logits, DType::bf16, s_.p.E),
                   bp, s_.p.spec.n_group, s_.p.spec.topk_group, s_.p.spec.renormalize, s_.p.spec.scale,
                   s_.p.spec.scoring, Stream(stream));
    }
  }
  void run_align(int set, void* stream) {
    const MoeBuffers& b = sets_[set];
    moe_align_block_size(vec(b.sorted, sz_.sorted_len), vec(b.eids, sz_.blocks), vec(b.total, 1),
                         mat(b.ids, DType::i32, s_.p.k), s_.p.E, s_.p.block_size, nullptr, Stream(stream));
  }
  void run_fused(int set, void* stream) {
    const MoeBuffers& b = sets_[set];
    const TensorView bias(b.bias.get(), DType::f32, Device::cuda(0), {s_.p.E});
    MoeRouterConfig c;
    c.scoring = s_.p.spec.scoring;
    c.n_group = s_.p.spec.n_group;
    c.topk_group = s_.p.spec.topk_group;
    c.renormalize = s_.p.spec.renormalize;
    c.routed_scaling_factor = s_.p.spec.scale;
    moe_route(mat(b.weights, DType::f32, s_.p.k), mat(b.ids, DType::i32, s_.p.k), vec(b.sorted, sz_.sorted_len),
              vec(b.eids, sz_.blocks), vec(b.total, 1), mat(b.logits, DType::bf16, s_.p.E), s_.p.bias ? &bias : nullptr,
              c, s_.p.block_size, Stream(stream));
  }
  Spec s_;
  MoeAlignSizes sz_;
  std::vector<MoeBuffers> sets_;
};

/// What sets a router case apart beyond T, E and k, so that rows of a case file's cross product differ: the scoring
/// where it is not the usual one (softmax without groups, sigmoid with them, as Qwen / Mixtral and DeepSeek-V3 route;
/// the built-in sets' labels carry none), groups, renormalisation, the scaling factor, the bias.
std::string router_suffix(const RouteProblem& p) {
  std::string s;
  const bool grouped = p.op == RouteOp::grouped_topk && p.spec.n_group > 1;
  if (grouped && p.spec.scoring == MoeScoring::softmax) s += ",softmax";
  if (!grouped && p.spec.scoring == MoeScoring::sigmoid) s += ",sigmoid";
  if (p.spec.n_group > 1) s += ",g" + std::to_string(p.spec.n_group) + "/" + std::to_string(p.spec.topk_group);
  if (p.spec.renormalize) s += ",renorm";
  if (p.spec.scale != 1.0) s += ",x" + value_text(ParamValue{p.spec.scale});
  if (p.bias) s += ",bias";
  return s;
}

class MoeCase : public OpCase {
 public:
  explicit MoeCase(const Spec& s) : s_(s) {
    family = "moe";
    op = s.kind == Kind::router ? route_op_name(s.p.op) : s.kind == Kind::align ? "moe_align_block_size" : "moe_route";
    shape = std::to_string(s.p.T) + "x" + std::to_string(s.p.E) + " k" + std::to_string(s.p.k);
    if (s.kind != Kind::router) shape += " bs" + std::to_string(s.p.block_size);
    if (s.kind != Kind::align) shape += router_suffix(s.p);
    baseline = s.kind == Kind::route ? "parts" : "";
    dtype = s.kind == Kind::align ? s.p.ids_dtype : s.p.dtype;  // the alignment reads only the ids
    rows = s.p.T;
    decode = s.p.T <= 64;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    reference::MoeComparison c;
    if (s_.kind == Kind::align) {
      AlignProblem a;
      a.T = nrows;
      a.k = s_.p.k;
      a.E = s_.p.E;
      a.block_size = s_.p.block_size;
      c = testing::check_align(a, device, seed);
    } else {
      RouteProblem p = with_tokens(s_.p, nrows);
      if (s_.kind == Kind::route) p.op = RouteOp::moe_route;
      c = testing::check_route(p, device, seed);
    }
    CheckOutcome r;
    r.pass = c.pass;
    r.max_abs_error = c.max_abs_error;
    r.rel_rms_error = c.rel_rms_error;
    r.tolerance = c.tolerance;
    r.detail = c.detail;
    r.rows_checked = nrows;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  double time_cpu_us(int64_t nrows) const override {
    uint64_t seed = 1;  // a new input set each time
    return median_wall_us([&] { (void)check(Device::cpu(), nrows, seed++); }, 3);  // includes the golden: an upper bound
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<MoeBench>(s_); }
  /// The schedule's padding (E (block_size - 1) entries) does not shrink with the tokens: the bytes of a T = rows case.
  double bytes_at(int64_t nrows) const override {
    return MoeBench(Spec{s_.kind, with_tokens(s_.p, nrows)}).bytes();
  }

 private:
  Spec s_;
};

CaseFactory make(RouteProblem router, std::initializer_list<int64_t> tokens) {
  std::vector<int64_t> ts(tokens);
  return [router, ts] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (Kind k : {Kind::router, Kind::align, Kind::route}) {
      for (int64_t t : ts) cases.push_back(std::make_unique<MoeCase>(Spec{k, with_tokens(router, t)}));
    }
    return cases;
  };
}

RouteProblem softmax_router(int64_t E, int64_t k) {
  RouteProblem p;
  p.op = RouteOp::topk_softmax;
  p.dtype = DType::bf16;
  p.E = E;
  p.k = k;
  p.spec.renormalize = true;
  p.block_size = 64;
  return p;
}

/// The case-file hooks of the MoE ops (docs/cases.md). Routers: tokens, num_experts, topk, renormalize, bias
/// (a correction bias, as DeepSeek's e_score_correction_bias), dtype of the logits; grouped_topk and moe_route add
/// n_group, topk_group, routed_scaling_factor and scoring; moe_align_block_size and moe_route take block_size.
OpSpec moe_op(Kind kind, RouteOp router) {
  OpSpec spec;
  spec.family = "moe";
  const bool grouped = kind == Kind::route || router == RouteOp::grouped_topk;
  spec.name = kind == Kind::router ? route_op_name(router) : kind == Kind::align ? "moe_align_block_size" : "moe_route";
  spec.help = kind == Kind::router ? "router: logits [T, E] -> top-k weights and ids [T, k]"
              : kind == Kind::align ? "block schedule of the fused-MoE GEMM for topk_ids [T, k] (ids of a router)"
                                    : "fused router: top-k weights and ids, then the block schedule";
  spec.params = {integer_param("tokens", "T"),
                 integer_param("num_experts", "E", std::nullopt, 1, kind == Kind::align ? kMaxAlignExperts : kMaxRouterExperts),
                 integer_param("topk", "k, experts per token", std::nullopt, 1, kMaxRouterTopk)};
  if (kind != Kind::align) {
    spec.params.push_back(bool_param("renormalize", "the k weights sum to 1", false));
    spec.params.push_back(bool_param("bias", "a correction bias [E] added for the selection", false));
    spec.params.push_back(dtype_param());
  }
  if (grouped) {
    spec.params.push_back(integer_param("n_group", "expert groups, dividing num_experts", 1, 1, 32));
    spec.params.push_back(integer_param("topk_group", "groups kept, <= n_group", 1, 1, 32));
    spec.params.push_back(ParamSpec{"routed_scaling_factor", ParamKind::number, "scales the weights", 1.0, {}, 0, INT64_MAX});
    spec.params.push_back(text_param("scoring", "scores: softmax or sigmoid", kind == Kind::route ? "softmax" : "sigmoid",
                                     {"softmax", "sigmoid"}));
  }
  if (kind != Kind::router) spec.params.push_back(integer_param("block_size", "rows of a GEMM block", 64, 1, int64_t{1} << 20));
  spec.make = [kind, router, grouped](const CaseParams& p) -> std::unique_ptr<OpCase> {
    RouteProblem rp = softmax_router(p.integer("num_experts"), p.integer("topk"));
    rp.op = router;
    rp.T = p.integer("tokens");
    if (rp.k > rp.E) {
      throw ParamError("topk", "topk " + std::to_string(rp.k) + " is more than num_experts " + std::to_string(rp.E));
    }
    bounded_product({{"tokens", rp.T}, {"num_experts", rp.E}}, 36);
    if (kind != Kind::align) {
      rp.spec.renormalize = p.boolean("renormalize");
      rp.bias = p.boolean("bias");
      rp.dtype = dtype_from_name("dtype", p.text("dtype"));
    }
    if (grouped) {
      rp.spec.n_group = p.integer("n_group");
      rp.spec.topk_group = p.integer("topk_group");
      rp.spec.scale = p.checkable_scale("routed_scaling_factor", "weights");
      rp.spec.scoring = p.text("scoring") == "sigmoid" ? MoeScoring::sigmoid : MoeScoring::softmax;
      if (rp.E % rp.spec.n_group != 0) {
        throw ParamError("n_group", "num_experts " + std::to_string(rp.E) + " is not a multiple of n_group " +
                                        std::to_string(rp.spec.n_group));
      }
      if (rp.spec.topk_group > rp.spec.n_group) {
        throw ParamError("topk_group", "topk_group " + std::to_string(rp.spec.topk_group) + " is more than n_group " +
                                           std::to_string(rp.spec.n_group));
      }
      if (rp.k > rp.spec.topk_group * (rp.E / rp.spec.n_group)) {
        throw ParamError("topk", "topk " + std::to_string(rp.k) + " is more than the experts of topk_group groups, " +
                                     std::to_string(rp.spec.topk_group * (rp.E / rp.spec.n_group)));
      }
      const bool plain = rp.spec.n_group == 1 && rp.spec.scale == 1.0 && rp.spec.scoring == MoeScoring::softmax;
      if (kind == Kind::route && !plain) rp.op = RouteOp::grouped_topk;  // the router moe_route runs
    }
    if (kind != Kind::router) rp.block_size = p.integer("block_size");
    // the ops' own int32 limits (src/ops/moe.cpp), so that a case the op would refuse is refused here, named, and
    // `fuseops model` lists it as rejected. The routers' (T x k int32 indices) for the routers and moe_route; the
    // align case's ids, made by a router too, are held by its schedule, whose length is at least T x k, so its own
    // limit below names it (moe_align_block_size is not a router)
    const int64_t numel = rp.T * rp.k;  // <= 2^36 * 32 after bounded_product
    if (kind != Kind::align && numel > std::numeric_limits<int32_t>::max()) {
      throw ParamError("tokens", "tokens x topk = " + std::to_string(rp.T) + " x " + std::to_string(rp.k) +
                                     " is 2^31 or more: the routers' limit (int32 indices)");
    }
    if (kind != Kind::router) {
      const int64_t len = moe_align_sizes(numel, rp.E, rp.block_size).sorted_len;
      if (len > std::numeric_limits<int32_t>::max()) {
        // blamed as the op blames it, the ids on the rows' key
        const detail::MoeScheduleBlame blame = detail::moe_schedule_blame(numel, rp.E, rp.block_size);
        throw ParamError(blame == detail::MoeScheduleBlame::block_size    ? "block_size"
                         : blame == detail::MoeScheduleBlame::num_experts ? "num_experts"
                                                                          : "tokens",
                         "the schedule (moe_align_sizes of tokens x topk = " + std::to_string(numel) +
                             ", num_experts " + std::to_string(rp.E) + ", block_size " +
                             std::to_string(rp.block_size) + ") of " + std::to_string(len) +
                             " entries is 2^31 or more (int32 schedule)");
      }
    }
    return std::make_unique<MoeCase>(Spec{kind, rp});
  };
  return spec;
}

}  // namespace

void register_moe_cases(Registry& r) {
  r.add_op(moe_op(Kind::router, RouteOp::topk_softmax));
  r.add_op(moe_op(Kind::router, RouteOp::grouped_topk));
  r.add_op(moe_op(Kind::align, RouteOp::topk_softmax));
  r.add_op(moe_op(Kind::route, RouteOp::topk_softmax));
  const auto tokens = {int64_t{1}, int64_t{16}, int64_t{64}, int64_t{4096}, int64_t{16384}};
  r.add("mixtral-8x7b", "routing: 8 experts, top-2 softmax", true, make(softmax_router(8, 2), tokens));
  r.add("qwen3-next-80b", "routing: 512 experts, top-10 softmax", true,
        make(softmax_router(512, 10), tokens));
  r.add("qwen3-moe", "Qwen3-MoE (30B-A3B / 235B-A22B): 128 experts, top-8 softmax routing", true,
        make(softmax_router(128, 8), tokens));
  RouteProblem ds = softmax_router(256, 8);
  ds.op = RouteOp::grouped_topk;
  ds.spec.scoring = MoeScoring::sigmoid;
  ds.spec.n_group = 8;
  ds.spec.topk_group = 4;
  ds.spec.scale = 2.5;
  ds.bias = true;
  r.add("deepseek-v3", "DeepSeek-V3 / R1: 256 experts, sigmoid + bias, 8 groups, top-4 groups, top-8, scale 2.5", true,
        make(ds, tokens));
}

}  // namespace fuseops::cli
