// The warp-per-unit form of the fused kkt + inverse (src/cuda/gdn_intra_warp.cu: chunk 64, f16 / bf16 k with K <=
// 128, f16 / bf16 output) against the block kernels it stands in for: the same bytes (the bit-identity contract of
// include/fuseops/gdn.h holds whichever kernel runs), the float64 golden, and fused == solve_tril(kkt in f32). Each
// case also asserts which kernel ran (the launch counter), so a dispatch change cannot make the comparison vacuous.
// GdnIntraPair.* run the same checks on the pair-per-unit kernel (two warps per unit), and its launch rule.
#include <string>
#include <vector>

#include "gdn_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "cuda/launch.h"
#endif

namespace fuseops_test::gdn {
namespace {

#if defined(FUSEOPS_WITH_CUDA)
constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;

/// Where the warp kernel runs, its pair-per-unit kernel (`pair`) or its one-warp kernel, until the guard's scope ends.
struct PairMode {
  explicit PairMode(bool pair) {
    fuseops::detail::cuda::set_kkt_pair_for_testing(pair ? KktWarpForTesting::always : KktWarpForTesting::never);
  }
  ~PairMode() { fuseops::detail::cuda::set_kkt_pair_for_testing(KktWarpForTesting::rule); }
  PairMode(const PairMode&) = delete;
  PairMode& operator=(const PairMode&) = delete;
};

/// The fused launches so far of the form under test: the pair kernel's, or the warp kernel's (which count the pair
/// kernel's too).
int64_t form_launches(bool pair) {
  return pair ? fuseops::detail::cuda::kkt_pair_launches_for_testing() : warp_launches();
}

/// The cases: partial last chunks, batch rows, varlen with empty / 1-token / chunk-edge sequences (int32 and int64
/// cu_seqlens), grouped heads, K from 16 to 128 (K % 16 != 0: the map's zero fill pads the tile's columns), every decay
/// kind, beta absent, f16 and bf16 in and out. (GridStrideWalk has more units than resident warps.)
std::vector<Spec> warp_cases() {
  std::vector<Spec> cases;
  auto add = [&](Spec s, DType kd, DType od, Decay decay) {
    s.k_dtype = kd;
    s.beta_dtype = kd;
    s.out_dtype = od;
    s.decay = decay;
    s.aligned = true;
    cases.push_back(s);
  };
  add(fixed(2, 200, 2, 4, 128, 64), bf16, bf16, Decay::realistic);
  add(fixed(1, 3 * 64 + 17, 1, 1, 64, 64), f16, f16, Decay::realistic);
  add(fixed(1, 130, 3, 3, 16, 64), bf16, f16, Decay::strong);
  add(fixed(1, 129, 2, 2, 40, 64), f16, bf16, Decay::extreme);
  add(fixed(1, 100, 1, 2, 104, 64), bf16, bf16, Decay::zero);
  add(fixed(1, 64, 2, 2, 120, 64), bf16, bf16, Decay::mixed);
  add(fixed(1, 190, 2, 2, 128, 64), bf16, bf16, Decay::none);
  Spec v = varlen({0, 1, 63, 64, 65, 128, 200, 0, 7, 33}, 2, 4, 128, 64);
  add(v, bf16, bf16, Decay::realistic);
  v.cu_dtype = DType::i32;
  add(v, f16, f16, Decay::strong);
  Spec no_beta = fixed(2, 96, 2, 2, 64, 64);
  no_beta.has_beta = false;
  add(no_beta, bf16, bf16, Decay::realistic);
  Spec mixed_beta = fixed(1, 150, 2, 2, 128, 64);
  add(mixed_beta, bf16, bf16, Decay::realistic);
  cases.back().beta_dtype = f32;
  Spec strided = fixed(1, 140, 2, 2, 128, 64);
  strided.strided = true;
  add(strided, bf16, bf16, Decay::realistic);
  return cases;
}

/// warp_cases on the warp kernel (testing mode `always`; its pair kernel where `pair`) against the block kernels.
void expect_warp_cases(bool pair) {
  std::mt19937_64 rng = test_rng();
  for (const Spec& s : warp_cases()) {
    SCOPED_TRACE(s.describe());
    const Inputs in = make_inputs(s, rng);
    const int64_t before = form_launches(pair);
    Results warp, block;
    {
      const WarpMode always(KktWarpForTesting::always);  // these grids are one wave: the rule keeps the block kernels
      const PairMode form(pair);
      warp = run_all(Where::cuda, s, in);
    }
    ASSERT_EQ(form_launches(pair), before + 2) << "the warp kernel did not run both fused calls";
    {
      const WarpMode never(KktWarpForTesting::never);
      block = run_all(Where::cuda, s, in);
    }
    ASSERT_EQ(form_launches(pair), before + 2) << "the warp kernel ran while switched off";
    EXPECT_TRUE(same_bytes(warp.Ai_fused, block.Ai_fused)) << "warp kernel != block kernel";
    EXPECT_TRUE(same_bytes(warp.Ai_fused, warp.Ai_unfused)) << "warp kernel != solve_tril(kkt in f32)";
    EXPECT_TRUE(same_bytes(warp.Ai_fused, warp.Ai_fused_again)) << "warp kernel not deterministic";
    const fuseops::reference::KktInputs gi = in.golden_inputs(s);
    EXPECT_TRUE(matches_golden(warp.Ai_fused, fuseops::reference::kkt_solve(gi),
                               fuseops::reference::GdnStage::kkt_solve, s.K, s.BT));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GdnIntraWarp, SameBytesAsTheBlockKernels) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  expect_warp_cases(/*pair=*/false);
}

// The same cases on the pair kernel (two warps per unit, meeting at named barriers).
TEST(GdnIntraPair, SameBytesAsTheBlockKernels) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  expect_warp_cases(/*pair=*/true);
}

/// A varlen grid of ~3200 units (more than an H100's or H200's resident warps and pairs), with empty and 3-token
/// sequences and a partial chunk.
Spec walk_spec() {
  Spec s = varlen({64 * 300 + 5, 0, 3, 64 * 100}, 4, 8, 128, 64);
  s.out_dtype = bf16;
  s.aligned = true;
  return s;
}

// More units than the GPU's resident warps (every warp walks several): by the launch rule, and in the testing mode
// `always`, which also takes the L2 hints of each warp's next unit on every grid (the rule takes them only where the
// warps have at most two units each, a range that depends on the GPU's size); against the block kernels.
TEST(GdnIntraWarp, GridStrideWalk) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  const Spec s = walk_spec();
  SCOPED_TRACE(s.describe());
  const Inputs in = make_inputs(s, rng);
  const PairMode one_warp(false);  // the one-warp kernel (the pair rule's range depends on the GPU's size)
  const int64_t before = warp_launches();
  const Results warp = run_all(Where::cuda, s, in);  // by the launch rule: several waves
  ASSERT_EQ(warp_launches(), before + 2);
  Results hinted, block;
  {
    const WarpMode always(KktWarpForTesting::always);
    hinted = run_all(Where::cuda, s, in);
  }
  ASSERT_EQ(warp_launches(), before + 4);
  {
    const WarpMode never(KktWarpForTesting::never);
    block = run_all(Where::cuda, s, in);
  }
  ASSERT_EQ(warp_launches(), before + 4);
  EXPECT_TRUE(same_bytes(warp.Ai_fused, block.Ai_fused)) << "warp kernel != block kernel";
  EXPECT_TRUE(same_bytes(hinted.Ai_fused, block.Ai_fused)) << "warp kernel with hints != block kernel";
  EXPECT_TRUE(same_bytes(warp.Ai_fused, warp.Ai_unfused)) << "warp kernel != solve_tril(kkt in f32)";
}

// The launch rule: a grid beyond one wave of the block kernels with at most 8 units per SM takes the pair kernel, one
// with more the one-warp kernel; both give the block kernels' bytes.
TEST(GdnIntraPair, LaunchRule) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  if (!fuseops::detail::is_sm90_or_newer(0)) GTEST_SKIP() << "the warp form runs on sm_90+ only";
  if (fuseops::detail::env_switched_off("FUSEOPS_GDN_KKT_WARP")) GTEST_SKIP() << "FUSEOPS_GDN_KKT_WARP=0";
  const bool pair_on = !fuseops::detail::env_switched_off("FUSEOPS_GDN_KKT_PAIR");
  const int64_t sms = fuseops::detail::sm_count(0);
  std::mt19937_64 rng = test_rng();
  // H = HV = 4: 4 x chunks units, and as many block-kernel blocks (more than one wave of 2 per SM).
  for (const int64_t per_sm : {4, 16}) {
    Spec s = fixed(1, 64 * per_sm / 4 * sms - 17, 4, 4, 128, 64);
    s.out_dtype = bf16;
    s.aligned = true;
    SCOPED_TRACE(s.describe());
    const Inputs in = make_inputs(s, rng);
    const int64_t warp_before = warp_launches(), pair_before = form_launches(true);
    const Results by_rule = run_all(Where::cuda, s, in);
    ASSERT_EQ(warp_launches(), warp_before + 2) << "the warp form did not run";
    ASSERT_EQ(form_launches(true), pair_before + (pair_on && per_sm <= 8 ? 2 : 0)) << "the pair rule took the other kernel";
    Results block;
    {
      const WarpMode never(KktWarpForTesting::never);
      block = run_all(Where::cuda, s, in);
    }
    EXPECT_TRUE(same_bytes(by_rule.Ai_fused, block.Ai_fused)) << "warp form != block kernel";
    EXPECT_TRUE(same_bytes(by_rule.Ai_fused, by_rule.Ai_unfused)) << "warp form != solve_tril(kkt in f32)";
  }
}

// The pair kernel on more units than resident pairs (every block walks several, its region and mbarrier reused).
TEST(GdnIntraPair, GridStrideWalk) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  const Spec s = walk_spec();
  SCOPED_TRACE(s.describe());
  const Inputs in = make_inputs(s, rng);
  const int64_t before = form_launches(true);
  Results pair, block;
  {
    const PairMode form(true);
    pair = run_all(Where::cuda, s, in);
  }
  ASSERT_EQ(form_launches(true), before + 2);
  {
    const WarpMode never(KktWarpForTesting::never);
    block = run_all(Where::cuda, s, in);
  }
  ASSERT_EQ(form_launches(true), before + 2);
  EXPECT_TRUE(same_bytes(pair.Ai_fused, block.Ai_fused)) << "pair kernel != block kernel";
  EXPECT_TRUE(same_bytes(pair.Ai_fused, pair.Ai_unfused)) << "pair kernel != solve_tril(kkt in f32)";
}

// Malformed cu_seqlens on the warp kernel (each unit looks its chunk up; the unit of value head 0 records a bad
// sequence): recorded with the op, the argument and the first bad sequence, nothing written outside the sequences'
// clamped ranges, inputs untouched. (With T = 0 k has no tensor map: the block kernels take the call.)
void expect_malformed_cu(bool pair) {
  std::mt19937_64 rng = test_rng();
  const WarpMode always(KktWarpForTesting::always);
  const PairMode form(pair);
  for (const BadCu& bad : bad_cus()) {
    SCOPED_TRACE(std::string("cu_seqlens ") + bad.what);
    const Clamped clamped = clamped_ranges(bad.cu, bad.T);
    Spec s = fixed(1, bad.T, 2, 4, 128, 64);
    s.out_dtype = bf16;
    const Inputs in = make_inputs(s, rng);
    constexpr int64_t kGuard = 8;  // 16-byte aligned tensors: the warp kernel applies
    Placed k(Where::cuda, in.k, 0, kGuard), g(Where::cuda, in.g, 0, kGuard), beta(Where::cuda, in.beta, 0, kGuard),
        cup(Where::cuda, ft::index_tensor(DType::i64, bad.cu), 0, kGuard),
        out(Where::cuda, bf16, {1, s.T, s.HV, 64}, kGuard);
    for (Placed* p : {&k, &g, &beta, &cup, &out}) p->upload();
    fuseops::clear_errors();
    const TensorView kv = k.view(), gv = g.view(), bv = beta.view(), cv = cup.view();
    const int64_t before = form_launches(pair);
    EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule_fwd_kkt_solve(out.view(), kv, &gv, &bv, 64, &cv));
    EXPECT_EQ(form_launches(pair), before + (s.T > 0 ? 1 : 0)) << "T = 0: no tensor map, the block kernels";
    expect_malformed_outcome(take_device_error(), "chunk_gated_delta_rule_fwd_kkt_solve", clamped,
                             {&k, &g, &beta, &cup}, out);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GdnIntraWarp, MalformedCuSeqlens) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG is set: ops raise at once";
  expect_malformed_cu(/*pair=*/false);
}

TEST(GdnIntraPair, MalformedCuSeqlens) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG is set: ops raise at once";
  expect_malformed_cu(/*pair=*/true);
}

// Where it does not apply (chunk 32, f32 output, K > 128, f32 k), the block kernels run, even when asked for it.
TEST(GdnIntraWarp, OtherConfigurationsTakeTheBlockKernels) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  std::vector<Spec> cases = {fixed(1, 100, 1, 1, 128, 32), fixed(1, 100, 1, 1, 128, 64), fixed(1, 100, 1, 1, 136, 64),
                             fixed(1, 100, 1, 1, 128, 64)};
  cases[0].out_dtype = bf16;
  cases[1].out_dtype = f32;
  cases[2].out_dtype = bf16;
  cases[3].out_dtype = bf16;
  cases[3].k_dtype = f32;
  for (Spec& s : cases) s.aligned = true;
  const WarpMode always(KktWarpForTesting::always);
  for (const Spec& s : cases) {
    SCOPED_TRACE(s.describe());
    const int64_t before = warp_launches();
    check_spec(Where::cuda, s, rng);
    EXPECT_EQ(warp_launches(), before);
  }
}

// The warp and pair kernels take k's rows by tensor-map copies. A key-head broadcast (a zero head stride) gets no map:
// the block kernels run instead, with the bytes the warp kernel gives for the same keys stored per head.
TEST(GdnIntraWarp, BroadcastKeysTakeTheBlockKernels) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  Spec one = fixed(1, 150, 1, 2, 128, 64);
  one.out_dtype = bf16;
  one.aligned = true;
  const Inputs in = make_inputs(one, rng);  // k [1, 150, 1, 128]
  HostTensor dup_k(bf16, {1, 150, 2, 128});  // the same keys stored for both key heads
  for (int64_t t = 0; t < 150; ++t) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t c = 0; c < 128; ++c) dup_k.set(t * 2 + h, c, static_cast<float>(in.k.get(t, c)));
    }
  }
  const std::vector<int64_t> shape = {1, 150, 2, 64};
  for (const bool pair : {false, true}) {
    SCOPED_TRACE(pair ? "pair kernel" : "one-warp kernel");
    const WarpMode always(KktWarpForTesting::always);
    const PairMode form(pair);
    Placed k(Where::cuda, in.k, 0, 8), g(Where::cuda, in.g, 0, 8), beta(Where::cuda, in.beta, 0, 8);
    Placed kd(Where::cuda, dup_k, 0, 8);
    Placed out_view(Where::cuda, bf16, shape, 8), out_dup(Where::cuda, bf16, shape, 8);
    for (Placed* p : {&k, &g, &beta, &kd, &out_view, &out_dup}) p->upload();
    const TensorView k1 = k.view();
    const TensorView kb(k1.data, k1.dtype, k1.device, {1, 150, 2, 128}, {k1.stride(0), k1.stride(1), 0, 1});
    const TensorView gv = g.view(), bv = beta.view();
    const int64_t before = form_launches(pair);
    fuseops::chunk_gated_delta_rule_fwd_kkt_solve(out_view.view(), kb, &gv, &bv, 64, nullptr);
    ASSERT_EQ(form_launches(pair), before) << "the warp form ran on a broadcast view";
    fuseops::chunk_gated_delta_rule_fwd_kkt_solve(out_dup.view(), kd.view(), &gv, &bv, 64, nullptr);
    ASSERT_EQ(form_launches(pair), before + 1) << "the warp form did not run on the stored keys";
    out_view.download();
    out_dup.download();
    EXPECT_TRUE(out_view.untouched_outside(true));
    EXPECT_TRUE(same_bytes(out_view.read(), out_dup.read())) << "block kernels on the view != warp form";
  }
}
#endif

}  // namespace
}  // namespace fuseops_test::gdn
