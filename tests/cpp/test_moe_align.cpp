// moe_align_block_size against the exact golden on the CPU and CUDA backends: schedules including the
// ascending-flat-index order inside each expert region, padding ids, expert maps, bad ids (device error record),
// i32 / i64 ids, pad_sorted_ids; the CUDA variants (small, one block, cluster, wide) on both sides of every switch.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/moe_align_wide.h"
#include "common/moe_math.h"
#include "test_util.h"
#include "testing/moe_run.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using ft::AlignProblem;

Device device_of(Where where) { return where == Where::cuda ? Device::cuda(0) : Device::cpu(); }

class MoeAlignTest : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override { FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam()); }
  void check(const AlignProblem& p) {
    const uint64_t seed = test_rng()();
    const auto c = ft::check_align(p, device_of(GetParam()), seed);
    EXPECT_TRUE(c.pass) << p.describe() << " seed " << seed << ": " << c.violations << " violations, first: " << c.detail;
  }
  bool large() const { return GetParam() == Where::cuda; }
};

TEST_P(MoeAlignTest, AlignShapes) {
  const int64_t Es[] = {8, 60, 64, 256, 1024, 4096};
  int n = 0;
  for (int64_t E : Es) {
    for (int64_t T : {0, 1, 3, 200}) {
      for (int64_t bs : {1, 16, 64}) {
        AlignProblem p;
        p.T = T;
        p.k = n % 3 == 0 ? 1 : n % 3 == 1 ? 8 : 6;
        p.E = E;
        p.block_size = bs;
        p.pad_sorted_ids = n % 2 == 1;
        p.ids_dtype = n % 4 == 3 ? DType::i64 : DType::i32;
        p.padding_fraction = n % 5 == 0 ? 0.2 : 0;
        ++n;
        check(p);
      }
    }
  }
}

TEST_P(MoeAlignTest, AlignExpertMapAndSkew) {
  for (int64_t E : {8, 256, 1024}) {
    AlignProblem p;
    p.T = 300;
    p.k = 8;
    p.E = E;
    p.block_size = 16;
    p.expert_map = true;
    p.padding_fraction = 0.1;
    check(p);
    p.expert_map = false;
    p.skewed = true;
    check(p);
  }
}

// The order promise at sizes where the CUDA schedule runs as a cluster of blocks: each region lists its flat indices
// in ascending order (the golden's stable sort), and repeated runs are bitwise identical.
TEST_P(MoeAlignTest, AlignDeterministicLarge) {
  const int64_t T = large() ? 16384 : 2048;
  AlignProblem p;
  p.T = T;
  p.k = 8;
  p.E = 256;
  p.block_size = 64;
  check(p);
  p.skewed = true;
  p.block_size = 128;
  check(p);
  p.E = 1024;
  p.k = 10;
  p.skewed = false;
  p.expert_map = true;
  check(p);
  const uint64_t seed = test_rng()();
  const HostTensor ids = ft::make_ids(p, seed);
  const HostTensor map = ft::make_expert_map(p, seed);
  const auto a = ft::run_align(p, ids, &map, device_of(GetParam()));
  const auto b = ft::run_align(p, ids, &map, device_of(GetParam()));
  EXPECT_TRUE(same_bytes(a.sorted, b.sorted));
}

// The n-th alignment case of a series, `numel` ids over E experts: k 10, 8 or 1 (whichever divides numel); block
// size (64, 16, 1, 128), skew (long runs of one expert across lanes, rounds, warps and blocks), padding ids, expert
// maps, i64 ids and pad_sorted_ids varied with n.
AlignProblem align_case(int64_t numel, int64_t E, int n) {
  AlignProblem p;
  p.k = numel > 0 && numel % 10 == 0 ? 10 : numel > 0 && numel % 8 == 0 ? 8 : 1;
  p.T = numel / p.k;
  p.E = E;
  p.block_size = n % 4 == 0 ? 64 : n % 4 == 1 ? 16 : n % 4 == 2 ? 1 : 128;
  p.skewed = n % 3 == 1;
  p.padding_fraction = n % 5 == 2 ? 0.05 : 0;
  p.expert_map = n % 6 == 3;
  p.ids_dtype = n % 7 == 4 ? DType::i64 : DType::i32;
  p.pad_sorted_ids = n % 2 == 1;
  return p;
}

// The sizes where the CUDA schedule changes variant (fuseops::detail::moe_align_plan on sm_90): the most ids each
// register variant takes (rounds 1 and 4 on one block; 4, 16 and 32 on a cluster of 8), so that `cap` runs one
// variant and `cap + 1` the next (or the streamed fallback).
std::vector<int64_t> align_switch_sizes(int64_t E) {
  std::vector<int64_t> sizes;
  for (int rounds : {1, 4, 16, 32}) {
    const int64_t per_block =
        int64_t{fuseops::detail::moe_align_warps(E, rounds, fuseops::detail::kMoeAlignSmemWords)} * 32 * rounds;
    if (rounds <= 4) sizes.push_back(per_block);
    if (rounds >= 4) sizes.push_back(8 * per_block);
  }
  return sizes;
}

TEST(MoeAlignPlan, SwitchSizesChangeVariant) {
  for (int64_t E : {8, 60, 160, 256, 1024, 4096}) {
    for (int64_t cap : align_switch_sizes(E)) {
      const auto a = fuseops::detail::moe_align_plan(cap, E, 8, fuseops::detail::kMoeAlignSmemWords);
      const auto b = fuseops::detail::moe_align_plan(cap + 1, E, 8, fuseops::detail::kMoeAlignSmemWords);
      EXPECT_GT(a.rounds, 0) << "E " << E << " numel " << cap;
      EXPECT_TRUE(a.rounds != b.rounds || a.cluster != b.cluster || a.replicas != b.replicas)
          << "E " << E << " numel " << cap;
      EXPECT_LE(a.smem_words, fuseops::detail::kMoeAlignSmemWords);
      EXPECT_LE(b.smem_words, fuseops::detail::kMoeAlignSmemWords);
    }
  }
  // Decode sizes run the small variant (no cluster); 16384 x 8 on a cluster of 8 with 16 per lane.
  const auto decode = fuseops::detail::moe_align_plan(64 * 8, 256, 8, fuseops::detail::kMoeAlignSmemWords);
  EXPECT_EQ(1, decode.cluster);
  EXPECT_GT(decode.replicas, 0);
  const auto big = fuseops::detail::moe_align_plan(16384 * 8, 256, 8, fuseops::detail::kMoeAlignSmemWords);
  EXPECT_EQ(16, big.rounds);
  EXPECT_EQ(8, big.cluster);
}

// The small variant: up to kMoeAlignSmallMaxIds ids and kMoeAlignSmallMaxExperts experts, off above either (and
// when the id limit is -1); more blocks for more output words or experts, at most kMoeAlignSmallMaxBlocks.
TEST(MoeAlignPlan, SmallVariantSwitch) {
  using namespace fuseops::detail;
  const int64_t n = kMoeAlignSmallMaxIds, emax = kMoeAlignSmallMaxExperts;
  EXPECT_GT(moe_align_plan(0, 8, 8, kMoeAlignSmemWords, 128).replicas, 0);
  EXPECT_GT(moe_align_plan(n, emax, 8, kMoeAlignSmemWords, 1 << 20).replicas, 0);
  EXPECT_EQ(0, moe_align_plan(n + 1, 8, 8, kMoeAlignSmemWords, 1 << 20).replicas);
  EXPECT_EQ(0, moe_align_plan(1, emax + 1, 8, kMoeAlignSmemWords, 64).replicas);
  EXPECT_EQ(0, moe_align_plan(0, 8, 8, kMoeAlignSmemWords, 128, -1).replicas);
  const auto small = moe_align_plan(n, emax, 8, kMoeAlignSmemWords, 1 << 20);
  EXPECT_EQ(kMoeAlignSmallWarps, small.warps);
  EXPECT_EQ(kMoeAlignSmallRounds, small.rounds);
  EXPECT_EQ(kMoeAlignSmallMaxBlocks, small.replicas);
  EXPECT_LE(small.smem_words, kMoeAlignSmemWords);
  EXPECT_EQ(1, moe_align_plan(2, 8, 8, kMoeAlignSmemWords, 128 + 2).replicas);  // Mixtral, 1 token
  EXPECT_EQ(kMoeAlignSmallMaxBlocks, moe_align_plan(640, 512, 8, kMoeAlignSmemWords, 32896 + 514).replicas);
  EXPECT_LT(moe_align_plan(16, 8, 8, kMoeAlignSmemWords, 3000).replicas,
            moe_align_plan(16, 8, 8, kMoeAlignSmemWords, 9000).replicas);
}

// The small variant against the golden at and around its id and expert limits, the ids per lane (rounds of 32 per
// warp of 16) and the block counts it picks (one block for Mixtral decode, the most for E 512 x 640 ids): exact
// schedules, the ascending-flat-index order inside each region, the cases varied as align_case says. On the CPU
// backend the same cases check the CPU schedule.
TEST_P(MoeAlignTest, AlignSmallVariant) {
  const int64_t n = fuseops::detail::kMoeAlignSmallMaxIds, emax = fuseops::detail::kMoeAlignSmallMaxExperts;
  struct Case {
    int64_t numel, E;
  };
  const Case cases[] = {{0, 8},       {1, 8},        {2, 8},        {31, 60},       {32, 160},      {33, 256},
                        {255, 512},   {256, 128},    {640, 512},    {257, 128},     {767, 1024},    {768, 256},
                        {769, 8},     {n - 1, 1024}, {n, emax},     {n, 8},         {n + 1, 256},   {n + 1, 8},
                        {100, emax},  {100, emax + 1}, {640, 4096}, {128, 128},     {512, 256},     {160, 512},
                        {511, 60},    {513, 1000},   {600, 8}};
  int i = 0;
  for (const Case& c : cases) check(align_case(c.numel, c.E, i++));
}

// Block sizes that are not powers of two (the small variant divides by shifts for powers of two, else by integer
// division), with the number of GEMM blocks at its limit (one block per id: block size 1 and 3 with every expert
// used once or more) and past the outputs' end, and 1-3 experts (the ballots over 0-2 bits of the expert): exact
// schedules against the golden.
TEST_P(MoeAlignTest, AlignSmallOddBlockSizes) {
  struct Case {
    int64_t numel, E, bs;
  };
  const Case cases[] = {{1, 8, 3},       {10, 512, 48},   {160, 512, 100}, {640, 512, 3},   {512, 128, 1000},
                        {1024, 1024, 3}, {1024, 8, 7},    {1024, 1024, 1}, {777, 60, 48},   {2, 2, 5},
                        {1500, 256, 48}, {96, 4096, 3},  {5, 1, 4},       {300, 1, 1},     {33, 3, 64}};
  int n = 0;
  for (const Case& c : cases) {
    AlignProblem p = align_case(c.numel, c.E, n++);
    p.block_size = c.bs;
    check(p);
  }
}

// sorted_token_ids and expert_ids starting 1-5 words into their buffers (the small variant fills each block's chunk
// of the outputs with 16-byte stores between scalar heads and tails, so every alignment of the chunks): exact
// schedules against the golden and nothing written outside the outputs, on each variant's sizes (1 to 16 blocks of
// the small variant, then wide / one block).
TEST_P(MoeAlignTest, AlignUnalignedOutputs) {
  struct Case {
    int64_t numel, E, bs;
  };
  const Case cases[] = {{1, 8, 64},    {2, 8, 3},       {160, 512, 64}, {640, 512, 64}, {129, 128, 16},
                        {1024, 1024, 64}, {1000, 60, 7}, {5000, 256, 64}, {640, 4096, 64}};
  int n = 0;
  for (const Case& c : cases) {
    for (int64_t off : {1, 2, 3, 5}) {
      AlignProblem p = align_case(c.numel, c.E, n++);
      p.block_size = c.bs;
      p.out_offset = off;
      check(p);
    }
  }
}

// The one-block / cluster / streamed variants of the CUDA schedule on both sides of their switches (the wide variant
// takes most of these sizes at E <= 1024 on sm_90 unless FUSEOPS_MOE_ALIGN_WIDE=0; its own switches are in
// AlignWideVariantSwitches): exact schedules against the golden, the ascending-flat-index order inside each region
// included, the cases varied as align_case says.
TEST_P(MoeAlignTest, AlignVariantSwitches) {
  if (!large()) GTEST_SKIP() << "the switch sizes are those of the CUDA schedule (up to 164K ids)";
  int n = 0;
  for (int64_t E : {8, 60, 160, 256, 1024, 4096}) {
    for (int64_t cap : align_switch_sizes(E)) {
      for (int64_t numel : {cap, cap + 1}) check(align_case(numel, E, n++));
    }
  }
}

TEST_P(MoeAlignTest, AlignBadIdsAreSkippedAndRecorded) {
  fuseops::clear_errors();
  AlignProblem p;
  p.T = 50;
  p.k = 4;
  p.E = 16;
  p.block_size = 8;
  const uint64_t seed = test_rng()();
  HostTensor ids = ft::make_ids(p, seed);
  auto* v = static_cast<int32_t*>(ids.data());
  v[17] = 16;   // >= E
  v[90] = -7;   // < -1
  v[120] = 1000;
  v[3] = -1;    // padding: skipped silently
  const auto out = ft::run_align(p, ids, nullptr, device_of(GetParam()));
  const auto sz = fuseops::moe_align_sizes(p.T * p.k, p.E, p.block_size);
  const auto g = fuseops::reference::align(ids, p.E, p.block_size, sz.sorted_len, sz.blocks, nullptr);
  const auto c = fuseops::reference::compare_align(g, out.sorted, out.expert_ids, out.total);
  EXPECT_TRUE(c.pass) << c.detail;
  EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value,
                     {"moe_align_block_size: topk_ids", "index 17 (the index is the id's flat (row-major) index "
                      "in topk_ids: expected -1 (padding) or an expert id in [0, num_experts)"}));
  EXPECT_NO_THROW(fuseops::check_errors());

  // A bad map entry: recorded against expert_map with the global id.
  p.expert_map = true;
  HostTensor map = ft::make_expert_map(p, seed);
  ids = ft::make_ids(p, seed);
  v = static_cast<int32_t*>(ids.data());
  for (int64_t i = 0; i < ids.numel(); ++i) v[i] = static_cast<int32_t>(i % p.E);
  static_cast<int32_t*>(map.data())[5] = 99;
  const auto out2 = ft::run_align(p, ids, &map, device_of(GetParam()));
  const auto g2 = fuseops::reference::align(ids, p.E, p.block_size, sz.sorted_len, sz.blocks, &map);
  const auto c2 = fuseops::reference::compare_align(g2, out2.sorted, out2.expert_ids, out2.total);
  EXPECT_TRUE(c2.pass) << c2.detail;
  EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value,
                     {"moe_align_block_size: expert_map", "index 5"}));
}


// The wide variant's switches (fuseops::detail::moe_align_wide_plan with clusters of up to 8): it starts above
// the small variant (1024 ids) and its cluster size, cluster count and ids per lane change at powers of two up to
// its limit (524 288 ids), so 2^k and 2^k + 1 run different plans; not above 1024 experts, without clusters (before
// sm_90) or when turned off.
std::vector<int64_t> wide_switch_sizes() {
  std::vector<int64_t> sizes;
  for (int k = 10; k <= 19; ++k) sizes.push_back(int64_t{1} << k);
  return sizes;
}

TEST(MoeAlignPlan, WideVariantSwitches) {
  using namespace fuseops::detail;
  for (int64_t E : {1, 8, 60, 128, 256, 512, 1024}) {
    EXPECT_EQ(0, moe_align_wide_plan(kMoeAlignSmallMaxIds, E, 8, kMoeAlignSmemWords).clusters) << "E " << E;
    EXPECT_GT(moe_align_plan(kMoeAlignSmallMaxIds, E, 8, kMoeAlignSmemWords, 1 << 20).replicas, 0) << "E " << E;
    for (int64_t n : wide_switch_sizes()) {
      const auto a = moe_align_wide_plan(n, E, 8, kMoeAlignSmemWords);
      const auto b = moe_align_wide_plan(n + 1, E, 8, kMoeAlignSmemWords);
      EXPECT_TRUE(a.clusters != b.clusters || a.cluster != b.cluster || a.rounds != b.rounds) << "E " << E << " " << n;
      for (const auto& w : {a, b}) {
        if (w.clusters == 0) continue;
        EXPECT_EQ(0, w.cluster % w.clusters) << "E " << E << " " << n;  // clusters divide the cluster size
        EXPECT_LE(w.cluster, 8);
        EXPECT_LE(w.smem_words, kMoeAlignSmemWords);
        EXPECT_LE(w.rounds, kMoeAlignWideMaxRounds);
      }
      for (int64_t m : {n, n + 1}) {
        const auto w = moe_align_wide_plan(m, E, 8, kMoeAlignSmemWords);
        if (w.clusters == 0) continue;
        EXPECT_GE(w.slice * w.clusters * w.cluster, m);  // every id owned
        EXPECT_LE((w.slice + kMoeAlignWideWarps - 1) / kMoeAlignWideWarps, 32 * w.rounds);  // fits the registers
      }
    }
    EXPECT_GT(moe_align_wide_plan(kMoeAlignSmallMaxIds + 1, E, 8, kMoeAlignSmemWords).clusters, 0) << "E " << E;
    EXPECT_GT(moe_align_wide_plan(524288, E, 8, kMoeAlignSmemWords).clusters, 0) << "E " << E;
    EXPECT_EQ(0, moe_align_wide_plan(524289, E, 8, kMoeAlignSmemWords).clusters) << "E " << E;
  }
  EXPECT_EQ(0, moe_align_wide_plan(1 << 17, 1025, 8, kMoeAlignSmemWords).clusters);
  EXPECT_EQ(0, moe_align_wide_plan(1 << 17, 256, 1, kMoeAlignSmemWords).clusters);
  EXPECT_EQ(0, moe_align_wide_plan(1 << 17, 256, 8, kMoeAlignSmemWords, -1).clusters);
  EXPECT_EQ(0, moe_align_wide_plan(1 << 17, 256, 16, kMoeAlignSmemWords).clusters);  // clusters above 8
  // DeepSeek-V3 at 16384 tokens: 8 clusters of 8 blocks, 2048 ids per block (2 per lane).
  const auto ds = moe_align_wide_plan(16384 * 8, 256, 8, kMoeAlignSmemWords);
  EXPECT_EQ(8, ds.clusters);
  EXPECT_EQ(8, ds.cluster);
  EXPECT_EQ(2, ds.rounds);
  // After moe_route's router (one_round): Qwen3-Next at 4096 tokens (40 960 ids) on 8 clusters of 640 ids per block
  // (4 of 1 280 otherwise); DeepSeek-V3 at 4096 tokens keeps 4 clusters of 1 024 (one id per lane already); every id
  // still owned.
  const auto qn = moe_align_wide_plan(4096 * 10, 512, 8, kMoeAlignSmemWords);
  const auto qn1 = moe_align_wide_plan(4096 * 10, 512, 8, kMoeAlignSmemWords, kMoeAlignWideMinIds,
                                       kMoeAlignWideOwnIds, true);
  EXPECT_EQ(4, qn.clusters);
  EXPECT_EQ(2, qn.rounds);
  EXPECT_EQ(8, qn1.clusters);
  EXPECT_EQ(1, qn1.rounds);
  EXPECT_EQ(640, qn1.slice);
  const auto ds4 = moe_align_wide_plan(4096 * 8, 256, 8, kMoeAlignSmemWords, kMoeAlignWideMinIds,
                                       kMoeAlignWideOwnIds, true);
  EXPECT_EQ(4, ds4.clusters);
  EXPECT_EQ(1, ds4.rounds);
  for (int64_t m : {int64_t{1025}, int64_t{33000}, int64_t{100000}, int64_t{524288}}) {
    const auto w = moe_align_wide_plan(m, 512, 8, kMoeAlignSmemWords, kMoeAlignWideMinIds, kMoeAlignWideOwnIds, true);
    ASSERT_GT(w.clusters, 0) << m;
    EXPECT_EQ(0, w.cluster % w.clusters) << m;
    EXPECT_GE(w.slice * w.clusters * w.cluster, m) << m;
    EXPECT_LE((w.slice + kMoeAlignWideWarps - 1) / kMoeAlignWideWarps, 32 * w.rounds) << m;
  }
}

// Every wide plan on both sides of its switches (2^k - 1, 2^k, 2^k + 1) against the golden: exact schedules with
// the ascending-flat-index order inside each region, the cases varied as align_case says (block sizes, skew,
// padding ids, expert maps, i64 ids, pad_sorted_ids) over E from 1 to 1024. On the CPU backend only the sizes up
// to 8193 (CI time).
TEST_P(MoeAlignTest, AlignWideVariantSwitches) {
  const int64_t Es[] = {256, 8, 1024, 60, 512, 1, 128};
  int n = 0;
  for (int64_t size : wide_switch_sizes()) {
    if (!large() && size > 8192) break;
    for (int64_t numel : {size - 1, size, size + 1}) {
      check(align_case(numel, Es[n % 7], n));
      ++n;
    }
  }
}

// Hand-made ids at wide sizes: all ids on one expert, most experts empty (and the last one used), padding ids and
// ids >= E spread over the blocks (the smallest bad index recorded), a bad expert_map entry; i32 and i64; runs
// repeat bit for bit.
TEST_P(MoeAlignTest, AlignWideEdgeCases) {
  const int64_t numel = large() ? 16384 * 8 : 4104;
  auto run = [&](const AlignProblem& p, const ft::HostTensor& ids, const ft::HostTensor* map) {
    const auto out = ft::run_align(p, ids, map, device_of(GetParam()));
    const auto sz = fuseops::moe_align_sizes(p.T * p.k, p.E, p.block_size, p.pad_sorted_ids);
    const auto g = fuseops::reference::align(ids, p.E, p.block_size, sz.sorted_len, sz.blocks, map);
    const auto c = fuseops::reference::compare_align(g, out.sorted, out.expert_ids, out.total);
    EXPECT_TRUE(c.pass) << p.describe() << ": " << c.detail;
    return out;
  };
  for (DType dt : {DType::i32, DType::i64}) {
    AlignProblem p;
    p.k = 8;
    p.T = numel / p.k;
    p.E = 256;
    p.block_size = 64;
    p.ids_dtype = dt;
    p.pad_sorted_ids = dt == DType::i64;
    // All ids on expert 7.
    ft::HostTensor ids = ft::make_ids(p, 1);
    for (int64_t i = 0; i < numel; ++i) ft::put_id(ids, i, 7);
    const auto a = run(p, ids, nullptr);
    const auto b = run(p, ids, nullptr);
    EXPECT_TRUE(same_bytes(a.sorted, b.sorted));
    // Most experts empty: ids on experts 0..5 and E - 1 only (E 1024).
    p.E = 1024;
    for (int64_t i = 0; i < numel; ++i) ft::put_id(ids, i, i % 7 == 6 ? p.E - 1 : (i * 5) % 6);
    run(p, ids, nullptr);
    // Padding ids and bad ids in several blocks: skipped; the smallest bad index is recorded.
    fuseops::clear_errors();
    p.E = 256;
    ids = ft::make_ids(p, 2);
    const int64_t bad1 = numel / 3 + 5, bad2 = numel - 2;
    ft::put_id(ids, 0, -1);
    ft::put_id(ids, numel / 2, -1);
    ft::put_id(ids, bad2, -9);
    ft::put_id(ids, bad1, p.E);
    ft::put_id(ids, numel - 1, p.E + 1000);
    run(p, ids, nullptr);
    EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value,
                       {"moe_align_block_size: topk_ids", "index " + std::to_string(bad1)}));
    EXPECT_NO_THROW(fuseops::check_errors());
    // A bad expert_map entry (global id 5 -> 999): recorded against expert_map with the global id.
    p.expert_map = true;
    ft::HostTensor map = ft::make_expert_map(p, 3);
    static_cast<int32_t*>(map.data())[5] = 999;
    for (int64_t i = 0; i < numel; ++i) ft::put_id(ids, i, i % p.E);
    run(p, ids, &map);
    EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value,
                       {"moe_align_block_size: expert_map", "index 5"}));
  }
}

// The variant the CUDA schedule runs for `numel` ids over E experts on sm_90 (clusters of up to 8), as align()
// chooses it: small, wide, one block, cluster or streamed.
std::string cuda_align_variant(int64_t numel, int64_t E, int64_t out_words) {
  using namespace fuseops::detail;
  const auto plan = moe_align_plan(numel, E, 8, kMoeAlignSmemWords, out_words);
  if (plan.replicas > 0) return "small";
  if (moe_align_wide_plan(numel, E, 8, kMoeAlignSmemWords).clusters > 0) return "wide";
  if (plan.rounds == 0) return "streamed";
  return plan.cluster > 1 ? "cluster" : "one block";
}

// topk_ids with a row pitch (a column slice of a wider tensor; the gaps hold a valid expert, so a schedule that read
// them would differ) through every CUDA variant: exact schedules against the golden, i32 and i64, odd and even
// pitches. The sizes cover each variant (asserted from the plans).
TEST_P(MoeAlignTest, AlignStridedIds) {
  struct Case {
    int64_t T, k, E;
  };
  std::vector<Case> cases = {{1, 10, 512},  {64, 10, 512}, {100, 8, 60},  {160, 8, 128}, {513, 8, 256},
                             {50, 4, 4096}, {100, 8, 4096}, {2000, 8, 4096}};
  if (large()) {
    cases.push_back({16384, 8, 256});
    cases.push_back({8000, 8, 4096});
  }
  std::set<std::string> variants;
  int n = 0;
  for (const Case& c : cases) {
    AlignProblem p;
    p.T = c.T;
    p.k = c.k;
    p.E = c.E;
    p.block_size = n % 2 == 0 ? 64 : 16;
    p.ids_dtype = n % 3 == 1 ? DType::i64 : DType::i32;
    p.ids_pitch = c.k + (n % 2 == 0 ? 3 : 8);
    p.skewed = n % 4 == 3;
    p.expert_map = n % 5 == 2;
    p.pad_sorted_ids = n % 2 == 1;
    ++n;
    const auto sz = fuseops::moe_align_sizes(p.T * p.k, p.E, p.block_size, p.pad_sorted_ids);
    variants.insert(cuda_align_variant(p.T * p.k, p.E, sz.sorted_len + sz.blocks));
    check(p);
  }
  if (large()) {
    EXPECT_EQ((std::set<std::string>{"small", "wide", "one block", "cluster", "streamed"}), variants);
  }
}

// The wide variant's mid sizes (from just above the small variant: 1025-5120 ids, 128-640 tokens x k 8 / 10 over
// 128-1024 experts, where it replaced the one-block variants): exact schedules against the golden.
TEST_P(MoeAlignTest, AlignWideMidSizes) {
  struct Case {
    int64_t k, E;
  };
  const Case shapes[] = {{8, 128}, {8, 256}, {10, 512}, {8, 1024}};
  int n = 0;
  for (int64_t T : {129, 160, 256, 320, 512}) {
    for (const Case& c : shapes) {
      AlignProblem p = align_case(T * c.k, c.E, n++);
      p.T = T;
      p.k = c.k;
      const auto sz = fuseops::moe_align_sizes(p.T * p.k, p.E, p.block_size, p.pad_sorted_ids);
      EXPECT_EQ("wide", cuda_align_variant(p.T * p.k, p.E, sz.sorted_len + sz.blocks)) << p.describe();
      check(p);
    }
  }
}

// The wide variant with 8 ids per lane (its register limit) at E = 1024 (its expert limit, the most shared memory):
// 262 145 and 524 288 ids, with skew and an expert map.
TEST_P(MoeAlignTest, AlignWideMostExpertsMostRounds) {
  if (!large()) GTEST_SKIP() << "524 288 ids: CUDA only (CI time)";
  int n = 0;
  for (int64_t numel : {int64_t{262145}, int64_t{524288}}) {
    const auto w = fuseops::detail::moe_align_wide_plan(numel, 1024, 8, fuseops::detail::kMoeAlignSmemWords);
    EXPECT_EQ(fuseops::detail::kMoeAlignWideMaxRounds, w.rounds) << numel;
    for (int v = 0; v < 2; ++v) {
      AlignProblem p = align_case(numel, 1024, n++);
      p.skewed = v == 1;
      p.expert_map = v == 0;
      check(p);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeAlignTest, ::testing::Values(Where::cpu, Where::cuda),
                         [](const ::testing::TestParamInfo<Where>& i) { return std::string(where_name(i.param)); });

}  // namespace
}  // namespace fuseops_test
