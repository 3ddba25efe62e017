// MoE routing ops against the golden on the CPU and CUDA backends: routers (topk_softmax, grouped_topk, moe_route)
// over the expert counts and k of real models and odd ones, special rows (NaN, equal, +-inf, ties), T = 0, 1, 3 and
// large; moe_route identical to its parts (moe_align_block_size alone: test_moe_align.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/moe_math.h"
#include "test_util.h"
#include "testing/moe_run.h"

namespace fuseops_test {
namespace {

/// The first n rows of a [rows, cols] host tensor (n >= 1).
HostTensor first_rows(const HostTensor& x, int64_t n) {
  HostTensor out(x.dtype(), {n, x.shape()[1]});
  std::memcpy(out.data(), x.data(), out.bytes());
  return out;
}

using fuseops::Device;
using fuseops::MoeScoring;
using ft::AlignProblem;
using ft::RouteOp;
using ft::RouteProblem;

Device device_of(Where where) { return where == Where::cuda ? Device::cuda(0) : Device::cpu(); }

class MoeTest : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override { FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam()); }
  void check(const RouteProblem& p) {
    const uint64_t seed = test_rng()();
    const auto c = ft::check_route(p, device_of(GetParam()), seed);
    EXPECT_TRUE(c.pass) << p.describe() << " seed " << seed << ": " << c.violations << " violations, first: " << c.detail;
  }
  bool large() const { return GetParam() == Where::cuda; }
  // Routes 16-bit logits (no bias) and the same values as f32 logits (the one-warp-per-token router on CUDA) and
  // expects the same bytes; returns the 16-bit run's outputs.
  ft::RouteOutputs expect_same_as_f32(const RouteProblem& p, const HostTensor& logits) {
    HostTensor wide(DType::f32, {p.T, p.E});
    for (int64_t r = 0; r < p.T; ++r) {
      for (int64_t e = 0; e < p.E; ++e) wide.set(r, e, static_cast<float>(logits.get(r, e)));
    }
    RouteProblem q = p;
    q.dtype = DType::f32;
    q.row_pitch = 0;
    ft::RouteOutputs narrow = ft::run_route(p, logits, nullptr, device_of(GetParam()));
    const auto full = ft::run_route(q, wide, nullptr, device_of(GetParam()));
    EXPECT_TRUE(same_bytes(narrow.weights, full.weights)) << p.describe();
    EXPECT_TRUE(same_bytes(narrow.ids, full.ids)) << p.describe();
    return narrow;
  }
  // moe_route against the golden, and bit for bit against its parts: grouped_topk with the same router config,
  // then moe_align_block_size on its ids.
  void check_route_and_parts(const RouteProblem& p) {
    check(p);
    const uint64_t seed = test_rng()();
    const HostTensor logits = ft::make_logits(p, seed);
    const HostTensor bias = ft::make_bias(p, seed);
    const HostTensor* b = p.bias ? &bias : nullptr;
    const auto fused = ft::run_route(p, logits, b, device_of(GetParam()));
    RouteProblem parts = p;
    parts.op = RouteOp::grouped_topk;
    const auto sep = ft::run_route(parts, logits, b, device_of(GetParam()));
    const std::string what = p.describe();
    EXPECT_TRUE(same_bytes(fused.weights, sep.weights)) << what;
    EXPECT_TRUE(same_bytes(fused.ids, sep.ids)) << what;
    AlignProblem a;
    a.T = p.T;
    a.k = p.k;
    a.E = p.E;
    a.block_size = p.block_size;
    const auto sched = ft::run_align(a, sep.ids, nullptr, device_of(GetParam()));
    EXPECT_TRUE(same_bytes(fused.sorted, sched.sorted)) << what;
    EXPECT_TRUE(same_bytes(fused.expert_ids, sched.expert_ids)) << what;
    EXPECT_EQ(0, std::memcmp(fused.total.data(), sched.total.data(), 4)) << what;
  }
};

RouteProblem softmax_problem(int64_t T, int64_t E, int64_t k, DType dtype) {
  RouteProblem p;
  p.op = RouteOp::topk_softmax;
  p.T = T;
  p.E = E;
  p.k = k;
  p.dtype = dtype;
  return p;
}

RouteProblem grouped_problem(int64_t T, int64_t E, int64_t k, int64_t ng, int64_t tg, bool bias, MoeScoring scoring) {
  RouteProblem p = softmax_problem(T, E, k, DType::bf16);
  p.op = RouteOp::grouped_topk;
  p.spec.n_group = ng;
  p.spec.topk_group = tg;
  p.spec.scoring = scoring;
  p.spec.renormalize = true;
  p.spec.scale = 2.5;
  p.bias = bias;
  return p;
}

TEST_P(MoeTest, TopkSoftmaxExpertCounts) {
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  const int64_t Es[] = {8, 60, 64, 128, 160, 256, 384, 512, 1024};
  const int64_t ks[] = {1, 2, 6, 8, 10, 32};
  int n = 0;
  for (int64_t E : Es) {
    for (int64_t k : ks) {
      if (k > E) continue;
      RouteProblem p = softmax_problem(n % 3 == 0 ? 3 : 19, E, k, dtypes[n % 3]);
      p.spec.renormalize = n % 2 == 0;
      p.ids_dtype = n % 4 == 1 ? DType::i64 : DType::i32;
      p.special_rows = n % 5 == 0;
      ++n;
      check(p);
    }
  }
}

TEST_P(MoeTest, TopkSoftmaxCorrectionBiasAndPitch) {
  for (int64_t E : {8, 128, 384, 1024}) {
    RouteProblem p = softmax_problem(33, E, std::min<int64_t>(E, 8), DType::bf16);
    p.bias = true;
    p.bias_dtype = E == 128 ? DType::bf16 : DType::f32;
    p.spec.renormalize = true;
    p.row_pitch = E + 24;
    check(p);
  }
  // Rows not aligned for the vector loads (odd pitch: every other row takes the per-element loads), and an E that
  // ends inside a lane's range.
  for (int64_t E : {100, 128, 512}) {
    RouteProblem p = softmax_problem(9, E, 7, E == 512 ? DType::f32 : DType::f16);
    p.row_pitch = E + 1;
    check(p);
  }
}

TEST_P(MoeTest, TopkSoftmaxSpecialRows) {
  for (int64_t E : {8, 64, 160, 1024}) {
    for (bool renorm : {false, true}) {
      RouteProblem p = softmax_problem(6, E, std::min<int64_t>(E, 10), DType::f32);
      p.special_rows = true;
      p.spec.renormalize = renorm;
      check(p);
      p.bias = true;
      check(p);
    }
  }
}

TEST_P(MoeTest, TopkSoftmaxNoTokensAndOneToken) {
  check(softmax_problem(0, 64, 6, DType::bf16));
  check(softmax_problem(1, 64, 6, DType::bf16));
  check(softmax_problem(1, 1, 1, DType::f32));
}

// Small E at many tokens: the CUDA router packs 32 / L tokens into a warp (E <= 8: 4, E <= 16: 2; from 1024
// tokens). Against the golden (T not a multiple of the tokens per warp, so the last warp has idle segments; E not a
// power of two; bias; special rows; k up to E), and bit for bit equal to one token per warp (the same rows routed
// at T < 1024).
TEST_P(MoeTest, TopkSoftmaxSmallExpertsManyTokens) {
  struct Case {
    int64_t T, E, k;
    DType dtype;
    bool bias, renormalize;
  };
  const Case cases[] = {{4099, 8, 2, DType::bf16, false, true}, {1025, 5, 5, DType::f32, true, false},
                        {2051, 12, 7, DType::f16, true, true},  {1030, 16, 1, DType::bf16, false, false},
                        {1027, 3, 2, DType::f32, false, true}};
  for (const Case& c : cases) {
    RouteProblem p = softmax_problem(c.T, c.E, c.k, c.dtype);
    p.bias = c.bias;
    p.spec.renormalize = c.renormalize;
    p.special_rows = c.E != 16;
    check(p);
    const uint64_t seed = test_rng()();
    const HostTensor logits = ft::make_logits(p, seed);
    const HostTensor bias = ft::make_bias(p, seed);
    const auto many = ft::run_route(p, logits, p.bias ? &bias : nullptr, device_of(GetParam()));
    RouteProblem q = p;
    q.T = 200;
    HostTensor head(p.dtype, {q.T, p.E});
    std::memcpy(head.data(), logits.data(), head.bytes());
    const auto few = ft::run_route(q, head, q.bias ? &bias : nullptr, device_of(GetParam()));
    EXPECT_TRUE(same_bytes(first_rows(many.weights, q.T), few.weights)) << p.describe();
    EXPECT_TRUE(same_bytes(first_rows(many.ids, q.T), few.ids)) << p.describe();
  }
  // grouped_topk with every group kept takes the same path.
  check(grouped_problem(2000, 16, 4, 4, 4, true, MoeScoring::sigmoid));
}

// The packed router (CUDA, moe_packed.cuh: f16 / bf16 logits, no bias, every group kept, from E = 33 where a lane
// holds two experts) against the golden, and bit for bit against the same values routed as f32 logits (the
// one-warp-per-token router: route_token): E on both sides of every registers-per-lane bucket (32 | 33, 64 | 65,
// 128 | 129, 256, 511 | 512 | 513, 1000, 1024; E not a multiple of 32), k from 1 to 32 (more picks than a lane
// holds), special rows (NaN, equal, +-inf, coarse ties, 1e30), softmax and sigmoid scoring (grouped_topk with every
// group kept), renormalised or not, i64 ids, an odd row pitch (per-element loads); on CUDA 1025-4099 tokens too.
TEST_P(MoeTest, TopkSoftmaxPackedMatchesF32) {
  struct Case {
    int64_t T, E, k;
    DType dtype;
    bool softmax, renormalize;
    int64_t pitch;
  };
  std::vector<Case> cases = {
      {7, 32, 8, DType::bf16, true, true, 0},      {7, 33, 8, DType::bf16, true, false, 0},
      {9, 64, 32, DType::f16, true, true, 0},      {9, 65, 10, DType::bf16, true, true, 0},
      {5, 128, 8, DType::bf16, true, true, 0},     {5, 129, 1, DType::f16, true, false, 0},
      {6, 256, 8, DType::bf16, false, true, 0},    {6, 511, 10, DType::bf16, true, true, 0},
      {6, 512, 10, DType::bf16, true, true, 0},    {6, 512, 10, DType::f16, true, false, 513},
      {6, 513, 32, DType::bf16, true, true, 0},    {6, 1000, 17, DType::f16, false, false, 0},
      {6, 1024, 32, DType::bf16, true, true, 0},   {6, 1024, 2, DType::bf16, true, false, 1030},
      {64, 128, 8, DType::bf16, true, true, 0},    {64, 512, 10, DType::bf16, true, true, 0}};
  if (large()) {  // many tokens per launch (a grid-stride loop), E not a multiple of 32, k up to 32
    const Case more[] = {{4096, 512, 10, DType::bf16, true, true, 0},   {4099, 128, 8, DType::f16, true, false, 0},
                         {2050, 1024, 32, DType::bf16, true, true, 0},  {1025, 257, 1, DType::bf16, true, false, 0},
                         {1031, 300, 32, DType::f16, true, true, 0},    {1500, 384, 16, DType::bf16, false, true, 0},
                         {1029, 511, 10, DType::bf16, true, false, 513}, {2048, 512, 32, DType::f16, true, true, 0}};
    cases.insert(cases.end(), std::begin(more), std::end(more));
  }
  int n = 0;
  for (const Case& c : cases) {
    RouteProblem p = softmax_problem(c.T, c.E, c.k, c.dtype);
    if (!c.softmax) {
      p = grouped_problem(c.T, c.E, c.k, 1, 1, false, MoeScoring::sigmoid);
      p.dtype = c.dtype;
    }
    p.spec.renormalize = c.renormalize;
    p.special_rows = n % 2 == 0;
    p.ids_dtype = n % 3 == 1 ? DType::i64 : DType::i32;
    p.row_pitch = c.pitch;
    ++n;
    check(p);
    const uint64_t seed = test_rng()();
    const HostTensor logits = ft::make_logits(p, seed);
    expect_same_as_f32(p, logits);
  }
}

/// Rows of the threshold router's test: 16 times 18 patterns (the router runs from kThresholdMinTokens = 256 tokens).
constexpr int64_t kThresholdRows = 16 * 18;

/// Rows for the threshold router (CUDA, moe_threshold.cuh: 16-bit logits without a bias or group selection, E > 256,
/// k <= 16, from 256 tokens): each aimed at one of its branches for the given E and k (lane l holds experts
/// [l*vpt, l*vpt + vpt)).
/// Candidates are the keys >= tau, the k-th largest of the 32 lane maxima; at most 32 of them and a finite row
/// maximum take the threshold path, else the packed router runs.
HostTensor threshold_rows(int64_t E, int64_t k, DType dtype, int64_t pitch, uint64_t seed) {
  const int64_t vpt = E > 512 ? 32 : 16, T = kThresholdRows;
  HostTensor t(dtype, {T, E}, pitch);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto low = [&]() { return std::min(8.0f, std::max(-8.0f, normal(rng))); };
  // Row with `target` (>= k) candidates: lanes 0 .. k-2 hold target - 1 values above 50 between them (at least one
  // each), lane k-1's maximum is 50 (tau), every other value is below 10.
  auto crowd = [&](int64_t r, int64_t target) {
    for (int64_t e = 0; e < E; ++e) t.set(r, e, low());
    int64_t left = target - k, j = 0;
    for (int64_t l = 0; l + 1 < k; ++l) {
      const int64_t take = 1 + std::min(left, vpt - 1);
      left -= take - 1;
      for (int64_t i = 0; i < take; ++i) t.set(r, l * vpt + i, 100.0f + 0.5f * static_cast<float>(j++ % 50));
    }
    t.set(r, (k - 1) * vpt + 3, 50.0f);
  };
  for (int64_t r0 = 0; r0 < T; r0 += 18) {  // the 18 patterns, again with new random values
    for (int64_t e = 0; e < E; ++e) {
      const float f = static_cast<float>(e);
      t.set(r0 + 0, e, normal(rng));                         // ordinary
      t.set(r0 + 1, e, f / 8);                               // rising: the top keys crowd into the last lanes
      t.set(r0 + 2, e, -f / 8);                              // falling: into the first
      t.set(r0 + 3, e, 0.25f);                               // all equal: ties only
      t.set(r0 + 4, e, std::round(normal(rng)));             // coarse values
      t.set(r0 + 7, e, normal(rng));
      t.set(r0 + 8, e, normal(rng));
      t.set(r0 + 9, e, normal(rng));
      t.set(r0 + 10, e, -inf);                               // all -inf (maximum not finite)
      t.set(r0 + 11, e, e == E / 2 ? 3.0f : -inf);           // one finite value: -inf among the picks
      t.set(r0 + 12, e, e % 2 ? -0.0f : 0.0f);               // +-0 tie
      t.set(r0 + 13, e, e % 3 ? 1e30f : -1e30f);             // large magnitudes
      t.set(r0 + 14, e, low() * 1e-38f);                     // tiny values
      t.set(r0 + 15, e, e / vpt == 5 ? 20.0f + f / 64 : low());  // the top vpt keys in one lane
      t.set(r0 + 16, e, normal(rng) * 0.01f);
      t.set(r0 + 17, e, e % 7 == 0 ? -inf : normal(rng));    // -inf in the middle, finite maximum
    }
    crowd(r0 + 5, 32);
    crowd(r0 + 6, 33);
    t.set(r0 + 7, E - 1, nan);  // NaN, +inf: not finite at the top
    t.set(r0 + 8, 0, inf);
    t.set(r0 + 9, E / 3, -nan);
  }
  return t;
}

/// The host's view of the threshold router for one row: whether it takes the threshold path, and its candidates.
struct ThresholdRow {
  bool finite_top;
  int64_t candidates;
  bool fast() const { return finite_top && candidates <= 32; }
};

ThresholdRow threshold_model(const HostTensor& x, int64_t r, int64_t k) {
  using fuseops::detail::moe_packed_key_raw;
  using fuseops::detail::moe_packed_value;
  const int64_t E = x.shape()[1], vpt = E > 512 ? 32 : 16;
  std::vector<uint32_t> keys(32 * vpt, 0u), lane_max(32, 0u);
  for (int64_t e = 0; e < E; ++e) keys[e] = moe_packed_key_raw(static_cast<float>(x.get(r, e)), static_cast<int>(e));
  for (int64_t i = 0; i < 32 * vpt; ++i) lane_max[i / vpt] = std::max(lane_max[i / vpt], keys[i]);
  std::vector<uint32_t> sorted = lane_max;
  std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
  const uint32_t tau = sorted[k - 1];
  int64_t c = 0;
  for (uint32_t key : keys) c += key >= tau;
  const float top = moe_packed_value(sorted[0]);
  return {std::isfinite(top), c};
}

// The threshold router against the golden, and bit for bit against the same values routed as f32 logits (route_token)
// and so against the packed router: rows that take the threshold path (ordinary, +-0, tiny, large, exactly 32
// candidates, -inf among the picks) and rows that fall back (33 candidates, keys crowded in a few lanes, ties only,
// NaN / +inf / -inf maxima), 288 tokens (the router runs from 256); E 512, 300 and 511 (a lane past E and one ending
// inside the row), 1000 and 1024 (32 per lane); k 1 to 16 and 17 (the packed router); f16 and bf16; an odd pitch
// (per-element loads); softmax and sigmoid scoring, renormalised or not. The host model of the router's branches
// checks that the rows reach each of them.
TEST_P(MoeTest, TopkSoftmaxThresholdMatchesF32) {
  struct Case {
    int64_t E, k;
    DType dtype;
    bool softmax, renormalize;
    int64_t pitch;
  };
  const Case cases[] = {{512, 10, DType::bf16, true, true, 0},    {512, 3, DType::bf16, true, false, 0},
                        {512, 4, DType::f16, true, true, 0},      {512, 1, DType::bf16, true, true, 0},
                        {512, 2, DType::bf16, true, true, 513},   {512, 16, DType::f16, false, true, 0},
                        {512, 17, DType::bf16, true, true, 0},    {300, 10, DType::bf16, true, true, 0},
                        {511, 3, DType::f16, true, true, 515},    {1024, 10, DType::bf16, true, true, 0},
                        {1000, 3, DType::bf16, false, false, 0},  {1024, 16, DType::f16, true, true, 1027}};
  int fast = 0, fallback = 0, at32 = 0, at33 = 0, not_finite = 0, n = 0;
  for (const Case& c : cases) {
    RouteProblem p = softmax_problem(kThresholdRows, c.E, c.k, c.dtype);
    if (!c.softmax) {
      p = grouped_problem(kThresholdRows, c.E, c.k, 1, 1, false, MoeScoring::sigmoid);
      p.dtype = c.dtype;
    }
    p.spec.renormalize = c.renormalize;
    p.ids_dtype = n++ % 2 ? DType::i64 : DType::i32;
    p.row_pitch = c.pitch;
    const HostTensor logits = threshold_rows(c.E, c.k, c.dtype, c.pitch, test_rng()());
    for (int64_t r = 0; r < p.T && c.k <= 16; ++r) {
      const ThresholdRow m = threshold_model(logits, r, c.k);
      (m.fast() ? fast : fallback) += 1;
      at32 += m.fast() && m.candidates == 32;
      at33 += m.finite_top && m.candidates == 33;
      not_finite += !m.finite_top;
    }
    const auto narrow = expect_same_as_f32(p, logits);
    fuseops::reference::RouterSpec spec = p.spec;
    spec.k = p.k;
    const fuseops::reference::MoeComparison g = fuseops::reference::compare_route(
        fuseops::reference::route(logits, nullptr, spec), narrow.weights, narrow.ids, nullptr);
    EXPECT_TRUE(g.pass) << p.describe() << ": " << g.violations << " violations, first: " << g.detail;
  }
  EXPECT_GT(fast, 40 * 16);
  EXPECT_GT(fallback, 40 * 16);
  EXPECT_GE(at32, 3 * 16);
  EXPECT_GE(at33, 3 * 16);
  EXPECT_GT(not_finite, 0);
}

TEST_P(MoeTest, GroupedTopkModels) {
  check(grouped_problem(37, 256, 8, 8, 4, true, MoeScoring::sigmoid));   // DeepSeek-V3
  check(grouped_problem(37, 384, 8, 1, 1, true, MoeScoring::sigmoid));   // Kimi-K2
  check(grouped_problem(37, 160, 6, 8, 3, false, MoeScoring::softmax));  // DeepSeek-V2 style
  check(grouped_problem(37, 64, 10, 32, 7, true, MoeScoring::sigmoid));  // groups of 2
  check(grouped_problem(37, 60, 5, 30, 30, true, MoeScoring::softmax));  // every group kept
  check(grouped_problem(37, 1024, 32, 16, 4, true, MoeScoring::sigmoid));
  check(grouped_problem(37, 96, 3, 32, 3, true, MoeScoring::sigmoid));   // groups of 3, 3 candidates per group
  // Group scores merged over whole lanes (a power of two of them per group) or scanned from shared memory: groups
  // of one expert on one lane, lanes past the last group, three lanes per group (scanned).
  check(grouped_problem(37, 32, 4, 32, 5, true, MoeScoring::sigmoid));
  check(grouped_problem(37, 192, 8, 6, 2, true, MoeScoring::sigmoid));
  check(grouped_problem(37, 384, 8, 8, 4, true, MoeScoring::sigmoid));
  check(grouped_problem(37, 512, 10, 16, 5, false, MoeScoring::softmax));
  RouteProblem p = grouped_problem(9, 256, 8, 8, 4, true, MoeScoring::sigmoid);
  p.special_rows = true;
  check(p);
  p.bias = false;
  check(p);
  p.spec.renormalize = false;
  p.spec.scale = 1.0;
  p.ids_dtype = DType::i64;
  p.bias_dtype = DType::bf16;
  p.bias = true;
  check(p);
}

// Groups of exactly 32 experts (8 or 16 groups), sigmoid, no bias or a contiguous fp32 one: from 2048 tokens
// (kGroups32MinTokens) the CUDA router packs 32 / n_group tokens into a warp (moe_grouped32.cuh); topk_group =
// n_group / 2 (DeepSeek-V3) moves the surviving groups onto 16 keys per lane before the picks. Every topk_group, k
// from 1 to 32, batches just past the switch (2049 and 2051: a partly filled last warp), special rows, smaller
// batches (one warp per token), and the general router's shapes beside it (bf16 bias, softmax).
TEST_P(MoeTest, GroupedTopkGroupsOf32) {
  struct Case {
    int64_t T, E, k, ng, tg;
    bool bias;
  };
  const Case cases[] = {
      {1, 256, 8, 8, 4, true},        {3, 256, 8, 8, 4, false},       {64, 256, 8, 8, 4, true},
      {2049, 256, 8, 8, 4, true},     {2051, 256, 8, 8, 4, false},    {2049, 256, 1, 8, 1, true},
      {2049, 256, 32, 8, 1, true},    {2050, 256, 32, 8, 8, true},    {2051, 256, 2, 8, 2, false},
      {2051, 256, 6, 8, 3, true},     {2051, 256, 10, 8, 5, true},    {2051, 256, 16, 8, 6, false},
      {2051, 256, 9, 8, 7, true},     {2049, 512, 8, 16, 4, true},    {2049, 512, 32, 16, 16, false},
      {2049, 512, 1, 16, 1, true},    {2049, 512, 10, 16, 5, true},   {2049, 512, 20, 16, 11, true},
      {2049, 512, 8, 16, 8, true},    {2049, 512, 32, 16, 8, false}};
  for (const Case& c : cases) {
    RouteProblem p = grouped_problem(c.T, c.E, c.k, c.ng, c.tg, c.bias, MoeScoring::sigmoid);
    check(p);
    p.special_rows = true;
    p.spec.renormalize = false;
    p.ids_dtype = DType::i64;
    check(p);
  }
  RouteProblem p = grouped_problem(33, 256, 8, 8, 4, true, MoeScoring::sigmoid);
  p.bias_dtype = DType::bf16;  // general router
  check(p);
  check(grouped_problem(33, 256, 8, 8, 4, true, MoeScoring::softmax));  // general router
  if (large()) {
    check(grouped_problem(4099, 256, 8, 8, 4, true, MoeScoring::sigmoid));
    check(grouped_problem(4099, 512, 8, 16, 4, false, MoeScoring::sigmoid));
  }
}

// A token's routing does not depend on the batch around it: grouped_topk on 2047 tokens (on CUDA the group-warps
// router where it applies: groups of 32, topk_group * k <= 32; else one token per warp) and on 2100 tokens (the
// groups-of-32 router), and moe_route on the first rows only (one token per warp, route_token), agree bit for bit
// on those rows (with and without a bias and renormalisation, special rows, any k; group-warps shapes with 2 to 32
// groups and topk_group * k at and past 32).
TEST_P(MoeTest, GroupedTopkGroupsOf32MatchesOneTokenPerWarp) {
  struct Case {
    int64_t T, E, k, ng, tg;
    bool bias, renormalize;
  };
  const Case cases[] = {{37, 256, 8, 8, 4, true, true},   {37, 256, 8, 8, 4, false, true},
                        {64, 256, 32, 8, 2, true, false}, {16, 256, 3, 8, 8, true, true},
                        {5, 256, 17, 8, 3, true, true},   {16, 512, 12, 16, 3, false, true},
                        {3, 512, 32, 16, 16, false, false}, {16, 512, 8, 16, 8, false, true},
                        {40, 256, 32, 8, 4, true, true},  {9, 256, 32, 8, 1, true, true},
                        {9, 256, 1, 8, 7, true, false},   {9, 256, 11, 8, 3, true, true},
                        {9, 64, 16, 2, 1, false, true},   {9, 1024, 32, 32, 1, true, true},
                        {9, 1024, 4, 32, 8, true, true},  {9, 512, 16, 16, 2, true, true},
                        {9, 128, 10, 4, 3, true, false},  {9, 128, 11, 4, 3, true, true}};
  for (const Case& c : cases) {
    for (int64_t big_T : {2047, 2100}) {
      RouteProblem p = grouped_problem(c.T, c.E, c.k, c.ng, c.tg, c.bias, MoeScoring::sigmoid);
      p.op = RouteOp::moe_route;
      p.spec.renormalize = c.renormalize;
      p.special_rows = true;
      const uint64_t seed = test_rng()();
      const HostTensor bias = ft::make_bias(p, seed);
      RouteProblem big = p;  // the same first rows, then more tokens
      big.op = RouteOp::grouped_topk;
      big.T = big_T;
      const HostTensor big_logits = ft::make_logits(big, seed);
      HostTensor logits_head(big_logits.dtype(), {p.T, p.E});
      for (int64_t r = 0; r < p.T; ++r) {
        for (int64_t e = 0; e < p.E; ++e) logits_head.set(r, e, static_cast<float>(big_logits.get(r, e)));
      }
      const auto fused = ft::run_route(p, logits_head, c.bias ? &bias : nullptr, device_of(GetParam()));
      const auto sep = ft::run_route(big, big_logits, c.bias ? &bias : nullptr, device_of(GetParam()));
      EXPECT_TRUE(same_bytes(fused.weights, first_rows(sep.weights, p.T))) << p.describe() << " in " << big_T;
      EXPECT_TRUE(same_bytes(fused.ids, first_rows(sep.ids, p.T))) << p.describe() << " in " << big_T;
    }
  }
}

// f32 and f16 logits (bf16 above) through the group-warps router (CUDA, moe_group_warps.cuh: grouped_topk below
// kGroups32MinTokens tokens, one scalar load per expert of any dtype), with an fp32 and a bf16 bias: against the
// golden, and bit for bit against moe_route's fused router (one warp per token at 37 tokens) on the same rows; then
// the same first rows inside 2100 tokens (groups of 32 with the fp32 bias, one warp per token with the bf16 one); f16
// with k 8 on an odd row pitch (per-element loads on every other row).
TEST_P(MoeTest, GroupedTopkGroupWarpsF32AndF16Logits) {
  for (DType dtype : {DType::f32, DType::f16}) {
    for (DType bias_dtype : {DType::f32, DType::bf16}) {
      for (int64_t k : {8, 1}) {
        RouteProblem p = grouped_problem(37, 256, k, 8, 4, true, MoeScoring::sigmoid);
        p.op = RouteOp::moe_route;
        p.dtype = dtype;
        p.bias_dtype = bias_dtype;
        p.special_rows = true;
        p.spec.renormalize = k != 1;
        p.row_pitch = dtype == DType::f16 && k == 8 ? 257 : 0;  // every other row unaligned for the vector loads
        check_route_and_parts(p);
        const uint64_t seed = test_rng()();
        const HostTensor bias = ft::make_bias(p, seed);
        RouteProblem big = p;
        big.op = RouteOp::grouped_topk;
        big.T = 2100;
        const HostTensor big_logits = ft::make_logits(big, seed);
        const auto many = ft::run_route(big, big_logits, &bias, device_of(GetParam()));
        RouteProblem few = big;
        few.T = p.T;
        HostTensor head_logits(dtype, {few.T, few.E}, few.row_pitch);
        for (int64_t r = 0; r < few.T; ++r) {
          for (int64_t e = 0; e < few.E; ++e) head_logits.set(r, e, static_cast<float>(big_logits.get(r, e)));
        }
        const auto head = ft::run_route(few, head_logits, &bias, device_of(GetParam()));
        EXPECT_TRUE(same_bytes(first_rows(many.weights, p.T), head.weights)) << few.describe();
        EXPECT_TRUE(same_bytes(first_rows(many.ids, p.T), head.ids)) << few.describe();
      }
    }
  }
}

// The GPU's sigmoid (moe_sigmoid: the hardware's exp2 and reciprocal, 0 below 2^-126) over its whole range, and the
// groups-of-32 router's sanitising of NaN alone (sigmoid32): logits spread over [-79.5, 100] in the tokens of every
// other warp (+inf and -0 in some rows) and over [-200, 100] in the others (1 + e^-x overflows, results below
// 2^-126), bf16 and f16: 2100 tokens against the golden, and the first 64 bit for bit against moe_route's fused
// router (one warp per token, moe_sigmoid of the sanitised logits) on the same rows.
TEST_P(MoeTest, GroupedTopkGroupsOf32SigmoidRange) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    RouteProblem p = grouped_problem(2100, 256, 8, 8, 4, true, MoeScoring::sigmoid);
    p.dtype = dtype;
    std::mt19937_64 rng(test_rng()());
    std::uniform_real_distribution<float> near(-79.5f, 100.0f), wide(-200.0f, 100.0f);
    HostTensor logits(dtype, {p.T, p.E});
    for (int64_t r = 0; r < p.T; ++r) {
      for (int64_t e = 0; e < p.E; ++e) {
        float v = (r / 4) % 2 == 0 ? near(rng) : wide(rng);
        if (r % 4 == 1 && e % 17 == 0) v = std::numeric_limits<float>::infinity();  // scored as FLT_MAX
        if (r % 4 == 1 && e % 19 == 0) v = -0.0f;                                   // scored as +0
        logits.set(r, e, dtype == DType::f16 ? std::max(-65000.0f, v) : v);
      }
    }
    const HostTensor bias = ft::make_bias(p, test_rng()());
    const auto many = ft::run_route(p, logits, &bias, device_of(GetParam()));
    fuseops::reference::RouterSpec spec = p.spec;
    spec.k = p.k;
    const fuseops::reference::MoeComparison g = fuseops::reference::compare_route(
        fuseops::reference::route(logits, &bias, spec), many.weights, many.ids, nullptr);
    EXPECT_TRUE(g.pass) << p.describe() << ": " << g.violations << " violations, first: " << g.detail;
    RouteProblem fused = p;
    fused.op = RouteOp::moe_route;
    fused.T = 64;
    const auto head = ft::run_route(fused, first_rows(logits, fused.T), &bias, device_of(GetParam()));
    EXPECT_TRUE(same_bytes(first_rows(many.weights, fused.T), head.weights)) << fused.describe();
    EXPECT_TRUE(same_bytes(first_rows(many.ids, fused.T), head.ids)) << fused.describe();
  }
}

// The groups-of-32 router's candidate ranks (topk_group = n_group / 2, k <= n_group: the keys above the smallest
// second key of the surviving groups, ranked against each other) and its fallback to the picks (a warp with a token
// of more than 32 candidates): 2100 tokens (a partly filled last block) whose warps hold, by turns, random rows, rows
// of few distinct values over a bias of few values (equal keys across experts and groups), rows whose top keys crowd
// into one group (20-35 of its experts high: candidate counts on both sides of 32), rows near the fast sigmoid's end
// (-85..-75, with NaN, +-inf and -0), and one all-equal row among random ones. Against the golden, and the first 256
// rows bit for bit against moe_route's router on 64 rows at a time (not the groups-of-32 router); also k past
// n_group (the picks) and no bias.
TEST_P(MoeTest, GroupedTopkGroupsOf32CandidateRanks) {
  struct Case {
    int64_t E, k, ng, tg;
    bool bias;
  };
  const Case cases[] = {{256, 8, 8, 4, true},   {256, 8, 8, 4, false},  {256, 5, 8, 4, true},
                        {512, 16, 16, 8, true}, {512, 8, 16, 8, false}, {512, 20, 16, 8, true}};
  for (const Case& c : cases) {
    RouteProblem p = grouped_problem(2100, c.E, c.k, c.ng, c.tg, c.bias, MoeScoring::sigmoid);
    const int64_t per_warp = 32 / c.ng;
    std::mt19937_64 rng(test_rng()());
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::uniform_real_distribution<float> edge(-85.0f, -75.0f);
    HostTensor logits(p.dtype, {p.T, p.E});
    for (int64_t r = 0; r < p.T; ++r) {
      const int64_t kind = (r / per_warp) % 5;
      const int64_t crowd_group = r % c.ng, crowd = 20 + r % 16;
      for (int64_t e = 0; e < p.E; ++e) {
        float v = normal(rng);
        if (kind == 1) v = static_cast<float>(static_cast<int>(rng() % 5) - 3);  // -3 .. 1
        if (kind == 2) v = e / 32 == crowd_group && e % 32 < crowd ? 4.0f + 0.0625f * (e % 7) : v - 3.0f;
        if (kind == 3) {
          v = rng() % 2 ? edge(rng) : v;
          if (e % 41 == 3) v = std::numeric_limits<float>::quiet_NaN();
          if (e % 43 == 5) v = std::numeric_limits<float>::infinity();
          if (e % 47 == 7) v = -std::numeric_limits<float>::infinity();
          if (e % 53 == 9) v = -0.0f;
        }
        if (kind == 4 && r % per_warp == per_warp - 1) v = 0.5f;  // all equal: every key is a candidate
        logits.set(r, e, v);
      }
    }
    HostTensor bias(DType::f32, {p.E});
    for (int64_t e = 0; e < p.E; ++e) bias.set(0, e, 0.125f * static_cast<float>(e % 3));
    const HostTensor* b = c.bias ? &bias : nullptr;
    const auto many = ft::run_route(p, logits, b, device_of(GetParam()));
    fuseops::reference::RouterSpec spec = p.spec;
    spec.k = p.k;
    const fuseops::reference::MoeComparison g = fuseops::reference::compare_route(
        fuseops::reference::route(logits, b, spec), many.weights, many.ids, nullptr);
    EXPECT_TRUE(g.pass) << p.describe() << ": " << g.violations << " violations, first: " << g.detail;
    RouteProblem few = p;
    few.op = RouteOp::moe_route;
    few.T = 64;
    for (int64_t r0 = 0; r0 < 256; r0 += few.T) {
      HostTensor part(p.dtype, {few.T, p.E});
      for (int64_t r = 0; r < few.T; ++r) {
        for (int64_t e = 0; e < p.E; ++e) part.set(r, e, static_cast<float>(logits.get(r0 + r, e)));
      }
      const auto head = ft::run_route(few, part, b, device_of(GetParam()));
      HostTensor w(DType::f32, {few.T, p.k}), ids(p.ids_dtype, {few.T, p.k});
      std::memcpy(w.data(), static_cast<const char*>(many.weights.data()) + r0 * p.k * 4, w.bytes());
      std::memcpy(ids.data(), static_cast<const char*>(many.ids.data()) + r0 * p.k * 4, ids.bytes());
      EXPECT_TRUE(same_bytes(w, head.weights)) << p.describe() << " rows from " << r0;
      EXPECT_TRUE(same_bytes(ids, head.ids)) << p.describe() << " rows from " << r0;
    }
  }
}

TEST_P(MoeTest, GroupedTopkTiesPickLowerGroupsAndExperts) {
  // All-equal rows: every group score ties, so the lowest topk_group groups survive and the lowest experts win.
  RouteProblem p = grouped_problem(2, 256, 8, 8, 4, false, MoeScoring::sigmoid);
  p.special_rows = true;  // rows 0 (NaN) and 1 (equal)
  check(p);
}

TEST_P(MoeTest, MoeRouteMatchesGoldenAndParts) {
  // Sizes on both sides of the fused paths' token limits; 300 and 600 x 8 ids run the wide schedule variant on CUDA
  // (after the router: trusted i32 ids, and i64 ids).
  for (int64_t T : {0, 1, 16, 64, 300, 600}) {
    RouteProblem p = grouped_problem(T, 256, 8, 8, 4, true, MoeScoring::sigmoid);
    p.op = RouteOp::moe_route;
    check_route_and_parts(p);
    RouteProblem q = softmax_problem(T, 128, 8, DType::bf16);
    q.op = RouteOp::moe_route;
    q.spec.renormalize = true;
    q.block_size = 16;
    check(q);
    if (T == 600) {  // i64 ids: the wide schedule after the router without the trusted i32 fast path
      p.ids_dtype = DType::i64;
      check_route_and_parts(p);
    }
  }
}

// moe_route around its paths' limits: the small schedule's (ids kMoeAlignSmallMaxIds = 1024: 32 tokens of k 32;
// two launches up to 64 tokens, the fused cluster kernel from 65), cluster sizes set by the outputs (E 512, bs 64);
// with 8 groups of 32 experts (two launches at every size: the group-warps router) 1, 8 and 9 tokens, k 1 and 32,
// no bias, 16 groups and topk_group * k = 33 beside them; against the golden and bit for bit against its parts.
TEST_P(MoeTest, MoeRoutePathLimits) {
  struct Case {
    int64_t T, E, k, ng, tg;
    bool bias, softmax;
    int64_t block_size;
  };
  const Case cases[] = {{1, 8, 2, 1, 1, false, true, 64},      {8, 128, 8, 1, 1, false, true, 64},
                        {9, 256, 8, 8, 4, true, false, 64},    {33, 512, 10, 1, 1, false, true, 64},
                        {63, 160, 6, 8, 3, false, true, 16},   {64, 512, 10, 1, 1, false, true, 64},
                        {64, 256, 8, 8, 4, true, false, 1},    {65, 256, 8, 8, 4, true, false, 64},
                        {32, 1024, 32, 16, 4, true, false, 64}, {33, 1024, 32, 16, 4, true, false, 64},
                        {16, 64, 8, 1, 1, true, true, 128},    {64, 1024, 16, 1, 1, false, true, 16},
                        {1, 256, 1, 8, 1, true, false, 64},    {8, 256, 8, 8, 4, false, false, 64},
                        {9, 256, 8, 8, 4, true, false, 16},    {5, 256, 32, 8, 1, true, false, 64},
                        {4, 512, 8, 16, 2, true, false, 64},   {3, 256, 11, 8, 3, true, false, 64},
                        {65, 512, 10, 1, 1, false, true, 64},  {100, 128, 8, 1, 1, false, true, 16}};
  for (const Case& c : cases) {
    RouteProblem p = grouped_problem(c.T, c.E, c.k, c.ng, c.tg, c.bias, c.softmax ? MoeScoring::softmax
                                                                                    : MoeScoring::sigmoid);
    p.op = RouteOp::moe_route;
    p.block_size = c.block_size;
    check_route_and_parts(p);
  }
}

// moe_route at decode sizes (two launches: the schedule filling its padding before the PDL wait; the fused cluster
// kernel from 65 tokens): every lane width (E 5 to 1024: 1 to 32 experts per lane), f32 / f16 / bf16 logits (the
// packed router and route_token), a bias, i64 ids, special rows (NaN, ties), one to 16 schedule blocks (E and block
// size), k up to 32, block sizes that are not powers of two; against the golden and bit for bit against its parts.
TEST_P(MoeTest, MoeRouteDecodeCases) {
  struct Case {
    int64_t T, E, k, ng, tg;
    bool bias, softmax;
    int64_t block_size;
    DType dtype, ids;
  };
  const DType bf = DType::bf16, f16 = DType::f16, f32 = DType::f32, i32 = DType::i32, i64 = DType::i64;
  const Case cases[] = {{1, 8, 2, 1, 1, false, true, 64, bf, i32},        {1, 512, 10, 1, 1, false, true, 64, bf, i32},
                        {2, 64, 6, 1, 1, false, true, 16, f16, i64},      {3, 128, 8, 1, 1, false, true, 1, bf, i32},
                        {5, 256, 8, 1, 1, true, false, 64, f32, i32},     {7, 1024, 32, 1, 1, false, true, 64, bf, i64},
                        {8, 512, 10, 1, 1, false, true, 64, bf, i32},     {9, 512, 10, 1, 1, false, true, 64, bf, i32},
                        {8, 160, 6, 8, 3, false, true, 16, f32, i32},     {8, 1024, 8, 1, 1, true, true, 128, f16, i32},
                        {1, 256, 8, 8, 4, true, false, 64, bf, i32},      {2, 256, 8, 8, 4, true, false, 64, bf, i64},
                        {3, 256, 8, 8, 4, true, false, 64, bf, i32},
                        {2, 256, 32, 8, 1, false, false, 16, f32, i32},
                        {1, 60, 1, 1, 1, false, true, 64, f32, i32},      {4, 8, 8, 1, 1, false, true, 2, bf, i32},
                        {6, 512, 10, 1, 1, false, true, 48, bf, i32},     {40, 512, 10, 1, 1, false, true, 3, bf, i32},
                        {2, 256, 8, 8, 4, true, false, 100, bf, i32},     {30, 128, 8, 1, 1, false, true, 7, f16, i32},
                        {16, 512, 10, 1, 1, false, true, 64, bf, i64},    {17, 512, 10, 1, 1, false, true, 64, bf, i32},
                        {16, 128, 8, 1, 1, true, false, 3, f32, i32},
                        {12, 1024, 32, 1, 1, false, true, 64, f16, i32},
                        {16, 64, 4, 1, 1, false, true, 16, bf, i32},
                        {16, 8, 2, 1, 1, false, true, 64, bf, i32},       {33, 16, 4, 1, 1, true, true, 16, f16, i64},
                        {64, 8, 2, 1, 1, false, true, 64, bf, i32},       {64, 16, 16, 1, 1, false, false, 3, f32, i32},
                        {65, 8, 2, 1, 1, false, true, 64, bf, i32},       {40, 5, 3, 1, 1, true, false, 7, bf, i32},
                        {20, 16, 4, 4, 4, false, true, 64, bf, i32},      {20, 16, 4, 4, 2, false, true, 64, bf, i32}};
  int n = 0;
  for (const Case& c : cases) {
    RouteProblem p = grouped_problem(c.T, c.E, c.k, c.ng, c.tg, c.bias, c.softmax ? MoeScoring::softmax
                                                                                    : MoeScoring::sigmoid);
    p.op = RouteOp::moe_route;
    p.block_size = c.block_size;
    p.dtype = c.dtype;
    p.ids_dtype = c.ids;
    p.spec.renormalize = n % 3 != 2;
    p.special_rows = n % 4 == 1 && c.T >= 4;
    ++n;
    check_route_and_parts(p);
  }
}

// moe_route with the wide schedule after the lanes router (E <= 16 from 1024 tokens) and the packed router, against
// the golden and bit for bit against its parts.
TEST_P(MoeTest, MoeRouteWideAfterLanesAndPackedRouters) {
  struct Case {
    int64_t T, E, k;
  };
  for (const Case& c : {Case{1500, 8, 2}, Case{1024, 16, 4}, Case{700, 60, 4}}) {
    RouteProblem p = grouped_problem(c.T, c.E, c.k, 1, 1, false, MoeScoring::softmax);
    p.op = RouteOp::moe_route;
    check_route_and_parts(p);
  }
}

TEST_P(MoeTest, MoeRouteWideBiasedRouter) {
  // Kimi-K2-like (384 experts, bias): the CUDA moe_route runs the router and the schedule as two launches there.
  RouteProblem p = grouped_problem(16, 384, 8, 1, 1, true, MoeScoring::sigmoid);
  p.op = RouteOp::moe_route;
  check(p);
}

TEST_P(MoeTest, LargeRouting) {
  if (!large()) GTEST_SKIP() << "16384-token routing runs on CUDA only (CPU time in CI)";
  check(softmax_problem(16384, 512, 10, DType::bf16));
  check(grouped_problem(16384, 256, 8, 8, 4, true, MoeScoring::sigmoid));
  RouteProblem p = softmax_problem(16384, 1024, 32, DType::f32);
  p.bias = true;
  check(p);
  p = grouped_problem(4096, 256, 8, 8, 4, true, MoeScoring::sigmoid);
  p.op = RouteOp::moe_route;
  check(p);
  // moe_route's wide schedule after the router (capped registers, trusted ids) with 1 (more clusters: 4096 x 512,
  // k 10), 4 and 8 ids per lane: bit for bit its parts.
  for (int64_t T : {4096, 16384, 32768}) {
    RouteProblem q = grouped_problem(T, 512, 10, 1, 1, false, MoeScoring::softmax);
    q.op = RouteOp::moe_route;
    check_route_and_parts(q);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeTest, ::testing::Values(Where::cpu, Where::cuda),
                         [](const ::testing::TestParamInfo<Where>& i) { return std::string(where_name(i.param)); });

}  // namespace
}  // namespace fuseops_test
