// fp32 rules of the MoE routers shared by the CPU and CUDA backends (docs/ops/moe.md, "Semantics"): how a logit
// or bias value is made finite, the scores, and the total order used for every selection.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/hd.h"

namespace fuseops::detail {

/// NaN -> -FLT_MAX (NaN counts as -inf), +-inf -> +-FLT_MAX, -0 -> +0; finite values unchanged.
FUSEOPS_HD float moe_sanitize(float x) {
#if defined(__CUDA_ARCH__)
  // fmaxf returns its other operand for a NaN (max.f32), so NaN -> -FLT_MAX without a test and a select.
  return fminf(fmaxf(x, -FLT_MAX), FLT_MAX) + 0.0f;
#else
  if (x != x) return -FLT_MAX;
  return fminf(fmaxf(x, -FLT_MAX), FLT_MAX) + 0.0f;
#endif
}

/// sigmoid of a fp32 logit that is not NaN: 1 / (1 + e^-x) (0 from x < -88.7, 1 for large x; +-inf give 1 and 0).
/// On the CPU expf and an IEEE division. On the GPU the hardware's exp2 and reciprocal (ex2.approx.ftz,
/// rcp.approx.ftz: 4 instructions, against 12 for expf and the division): relative error at most (1.5 |x| + 7)
/// 2^-24 (the product x log2(e) rounded: |x| 2^-24, log2(e) in fp32: |x| 2^-25, ex2 2 ulp, the addition, rcp 1
/// ulp), and 0 where the result is below 2^-126 (x < -87.3); within the router's weight tolerance (docs/ops/moe.md,
/// "Tolerances"). Every CUDA router scores with it, so their results stay bitwise identical to one another.
FUSEOPS_HD float moe_sigmoid(float x) {
#if defined(__CUDA_ARCH__)
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return 1.0f / (1.0f + expf(-x));
#endif
}

/// An unsigned key whose unsigned order is the float order (-inf lowest); 0 is below every float.
FUSEOPS_HD uint32_t moe_order_key(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
#if defined(__CUDA_ARCH__)
  // The same key as u ^ (all ones or the top bit): a shift and one LOP3 (the select form compiles to three).
  return u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
#else
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
#endif
}

FUSEOPS_HD float moe_key_float(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

/// Packed keys of 16-bit logits (f16, bf16) without a bias: the sanitised value's order key and the expert in one
/// 32-bit word whose unsigned order is the routers' total order (higher value first, then the lower expert), so that
/// a maximum needs no index. A 16-bit value widened to fp32 has its 13 low mantissa bits zero, so its order key's 13
/// low bits are fixed (0 when positive, 0x1fff when negative) except for the sanitised +-FLT_MAX (from +-inf or
/// NaN), whose keys still differ from every 16-bit value's above bit 12: the key's top 19 bits keep the order and the
/// ties exactly, and the low kMoePackedExpertBits bits take the expert as (2^bits - 1 - e) (bits 10-12 are zero). 0
/// is below every packed key (experts past E). Checked for all 65536 values of both dtypes in
/// tests/cpp/test_moe_math.cpp.
constexpr int kMoePackedExpertBits = 10;
constexpr uint32_t kMoePackedExpertMask = (1u << kMoePackedExpertBits) - 1u;
constexpr uint32_t kMoePackedValueMask = ~0x1fffu;

/// x: a sanitised value of a 16-bit logit; e < 2^kMoePackedExpertBits.
FUSEOPS_HD uint32_t moe_packed_key(float x, int e) {
  return (moe_order_key(x) & kMoePackedValueMask) | (kMoePackedExpertMask - static_cast<uint32_t>(e));
}

FUSEOPS_HD int moe_packed_expert(uint32_t c) {
  return static_cast<int>(kMoePackedExpertMask - (c & kMoePackedExpertMask));
}

/// The packed key of a 16-bit logit x widened to fp32 WITHOUT sanitising it first: moe_packed_key(moe_sanitize(x), e)
/// for every finite x (-0 orders as +0: the sign test is the float compare x < 0); -inf keeps a key below every
/// finite value's, which moe_packed_value gives back as -inf; NaN and +inf get keys at or above +inf's, whose value is
/// not finite. So a router may skip the sanitising where it checks that the row's maximum is finite (and where -inf
/// and -FLT_MAX give the same weights). Checked for all 65536 values of both dtypes in tests/cpp/test_moe_math.cpp.
FUSEOPS_HD uint32_t moe_packed_key_raw(float x, int e) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  // order = x < 0 ? ~u : u | 2^31, as (u | 2^31) ^ s with s all ones below zero (a negative u has bit 31 set);
  // the expert is added below the masked bits (the same as or-ing it).
#if defined(__CUDA_ARCH__)
  uint32_t s;
  asm("set.lt.u32.f32 %0, %1, 0f00000000;" : "=r"(s) : "f"(x));
#else
  const uint32_t s = x < 0.0f ? ~0u : 0u;
#endif
  return (((u | 0x80000000u) ^ s) & kMoePackedValueMask) + (kMoePackedExpertMask - static_cast<uint32_t>(e));
}

/// The sanitised value of a packed key, bit for bit.
FUSEOPS_HD float moe_packed_value(uint32_t c) {
  uint32_t key = c & kMoePackedValueMask;
  if (!(key & 0x80000000u)) key |= 0x1fffu;  // negative values
  if (key == (moe_order_key(FLT_MAX) & kMoePackedValueMask)) key = moe_order_key(FLT_MAX);
  if (key == (moe_order_key(-FLT_MAX) | 0x1fffu)) key = moe_order_key(-FLT_MAX);
  return moe_key_float(key);
}

/// One merge level of moe_sort_desc: compare-exchange at distance STRIDE, blocks of SIZE descending where
/// (i & SIZE) == 0 (all of them at SIZE == N). Templates per level, so that every index is a constant.
template <int N, int SIZE, int STRIDE>
FUSEOPS_HD void moe_bitonic_level(uint32_t (&a)[N]) {
  for (int i = 0; i < N; ++i) {
    const int j = i ^ STRIDE;
    if (j > i) {
      const uint32_t hi = a[i] > a[j] ? a[i] : a[j], lo = a[i] > a[j] ? a[j] : a[i];
      const bool desc = (i & SIZE) == 0;
      a[i] = desc ? hi : lo;
      a[j] = desc ? lo : hi;
    }
  }
  if constexpr (STRIDE > 1) moe_bitonic_level<N, SIZE, STRIDE / 2>(a);
}

template <int N, int SIZE>
FUSEOPS_HD void moe_bitonic_from(uint32_t (&a)[N]) {
  if constexpr (SIZE <= N) {
    moe_bitonic_level<N, SIZE, SIZE / 2>(a);
    moe_bitonic_from<N, SIZE * 2>(a);
  }
}

/// Sorts N (a power of two) keys into descending order: a bitonic network, N log2 N (log2 N + 1) / 4
/// compare-exchanges of two min/max each, no branches.
template <int N>
FUSEOPS_HD void moe_sort_desc(uint32_t (&a)[N]) {
  static_assert((N & (N - 1)) == 0, "power of two");
  moe_bitonic_from<N, 2>(a);
}

/// ceil(a / b) * b for a >= 0, b >= 1, a <= INT64_MAX - (b - 1) (b - 1 is added first: a + b wrapped at that bound).
FUSEOPS_HD int64_t moe_round_up(int64_t a, int64_t b) { return (a + (b - 1)) / b * b; }

/// The argument a schedule length past its limit is blamed on (moe_align_sizes, moe_align_block_size, and the case
/// files' hooks): where numel < num_experts (length numel * block_size) the larger of the two; else the larger term of
/// numel + num_experts * (block_size - 1), the ids or the padding, and of the padding the larger factor.
enum class MoeScheduleBlame { ids, block_size, num_experts };
inline MoeScheduleBlame moe_schedule_blame(int64_t numel, int64_t num_experts, int64_t block_size) {
  if (numel < num_experts) return block_size >= numel ? MoeScheduleBlame::block_size : MoeScheduleBlame::ids;
  // num_experts * (block_size - 1) > numel, without the product (it may not fit)
  const bool padding = block_size > 1 && num_experts > numel / (block_size - 1);
  if (!padding) return MoeScheduleBlame::ids;
  return block_size - 1 >= num_experts ? MoeScheduleBlame::block_size : MoeScheduleBlame::num_experts;
}

}  // namespace fuseops::detail

namespace fuseops::detail {

/// Shared memory budget of the CUDA schedule kernel, in int32 words (200 KiB of the 227 KiB an sm_90 block may have).
constexpr int64_t kMoeAlignSmemWords = 200 * 1024 / 4;

/// How the CUDA schedule of moe_align_block_size runs for `numel` ids over E experts (docs/ops/moe.md, "CUDA
/// design"): `cluster` blocks of `warps` warps, every lane holding up to `rounds` ids in registers (rounds 0: the
/// streamed two-pass fallback, which has no staging buffer). Shared with the tests, which size their cases on both
/// sides of every switch.
struct MoeAlignPlan {
  int rounds = 1;
  int warps = 32;
  int cluster = 1;
  int64_t smem_words = 0;
  /// Small variant (> 0): this many independent blocks of kMoeAlignSmallWarps warps, each computing the whole
  /// schedule and writing its share of the outputs (no cluster, no shared state between blocks); 0: the register
  /// or streamed variants above.
  int replicas = 0;
};

/// The small variant of the schedule (docs/ops/moe-log.md, "moe_align_block_size: small variant") runs up to this many
/// ids (and up to kMoeAlignSmallMaxExperts experts): the one dispatch threshold to move for an A/B (0 turns the
/// variant off; the environment variable FUSEOPS_MOE_ALIGN_SMALL=0 does the same at run time).
constexpr int64_t kMoeAlignSmallMaxIds = 1024;
constexpr int64_t kMoeAlignSmallMaxExperts = 1024;
/// Warps per block of the small variant (16: two rounds of 32 ids per warp at most; measured faster than 8 and 32 at
/// every size, docs/ops/moe-log.md), ids per lane (kMoeAlignSmallMaxIds / (32 * warps)), most blocks, the experts and
/// the output words (sorted_token_ids + expert_ids) one block takes before another block is added.
constexpr int kMoeAlignSmallWarps = 16;
constexpr int kMoeAlignSmallRounds = 2;
constexpr int kMoeAlignSmallMaxBlocks = 16;
constexpr int64_t kMoeAlignSmallExpertsPerBlock = 64;
constexpr int64_t kMoeAlignSmallWordsPerBlock = 2048;
static_assert(kMoeAlignSmallMaxIds <= 32 * kMoeAlignSmallWarps * kMoeAlignSmallRounds,
              "ids per lane of the small variant");

/// Shared memory words of the small variant: per-warp counters [warps][E], region starts [E + 1], counts [E], scan
/// scratch [32], and per GEMM block of the regions (at most one per id) its expert.
inline int64_t moe_align_small_smem_words(int64_t E) {
  return (kMoeAlignSmallWarps + 2) * E + 1 + 32 + kMoeAlignSmallMaxIds;
}

/// Blocks of the small variant for `out_words` output words over E experts: enough that each writes about
/// kMoeAlignSmallWordsPerBlock words and takes at most kMoeAlignSmallExpertsPerBlock experts, at most
/// kMoeAlignSmallMaxBlocks.
inline int moe_align_small_blocks(int64_t out_words, int64_t E) {
  const int64_t by_words = (out_words + kMoeAlignSmallWordsPerBlock - 1) / kMoeAlignSmallWordsPerBlock;
  const int64_t by_experts = (E + kMoeAlignSmallExpertsPerBlock - 1) / kMoeAlignSmallExpertsPerBlock;
  return static_cast<int>(std::min<int64_t>(kMoeAlignSmallMaxBlocks, std::max<int64_t>({1, by_words, by_experts})));
}

/// Shared memory words of the schedule: per-warp counters [warps][E], five [E (+1)] arrays, the scan scratch and,
/// when rounds > 0, the block's staging buffer of warps * 32 * rounds ids.
inline int64_t moe_align_smem_words(int warps, int64_t E, int rounds) {
  return warps * (E + 32 * int64_t{rounds}) + 5 * E + 2 + 32;
}

/// Warps per block of the schedule with `rounds` ids per lane: 32 (1024 threads of at most 64 registers), 20 for
/// 32 rounds (640 threads of up to 96 registers: the 32 ids of a lane stay in registers without spilling).
FUSEOPS_HD constexpr int moe_align_max_warps(int rounds) { return rounds >= 32 ? 20 : 32; }

/// The largest warp count (<= moe_align_max_warps) whose shared memory fits `budget_words`, 0 if none.
inline int moe_align_warps(int64_t E, int rounds, int64_t budget_words) {
  const int64_t w = (budget_words - 5 * E - 34) / (E + 32 * int64_t{rounds}), cap = moe_align_max_warps(rounds);
  return static_cast<int>(w < 0 ? 0 : w > cap ? cap : w);
}

/// Up to `small_max_ids` ids (and kMoeAlignSmallMaxExperts experts): the small variant, its blocks sized by
/// `out_words` (sorted_token_ids + expert_ids). Else register rounds 1 and 4 on one block; then 4, 16, 32 on a
/// cluster of up to `max_cluster` blocks (1 before sm_90, where 16 and 32 run on one block); else the streamed
/// fallback on up to max_cluster blocks.
inline MoeAlignPlan moe_align_plan(int64_t numel, int64_t E, int max_cluster, int64_t budget_words,
                                   int64_t out_words = 0, int64_t small_max_ids = kMoeAlignSmallMaxIds) {
  MoeAlignPlan p;
  if (numel <= small_max_ids && E <= kMoeAlignSmallMaxExperts) {
    p.rounds = kMoeAlignSmallRounds;
    p.warps = kMoeAlignSmallWarps;
    p.replicas = moe_align_small_blocks(out_words, E);
    p.smem_words = moe_align_small_smem_words(E);
    return p;
  }
  auto fits = [&](int rounds, int64_t blocks_max) {
    const int w = moe_align_warps(E, rounds, budget_words);
    if (w < 1) return false;
    const int64_t per_block = int64_t{w} * 32 * rounds;
    const int64_t blocks = numel == 0 ? 1 : (numel + per_block - 1) / per_block;
    if (blocks > blocks_max) return false;
    p.rounds = rounds;
    p.warps = w;
    p.cluster = static_cast<int>(blocks);
    p.smem_words = moe_align_smem_words(w, E, rounds);
    return true;
  };
  if (fits(1, 1) || fits(4, 1)) return p;
  for (int rounds : {4, 16, 32}) {
    if (fits(rounds, max_cluster)) return p;
  }
  p.rounds = 0;
  p.warps = moe_align_warps(E, 0, budget_words);
  p.cluster = static_cast<int>(std::min<int64_t>(max_cluster, std::max<int64_t>(1, (numel + 4095) / 4096)));
  p.smem_words = moe_align_smem_words(p.warps, E, 0);
  return p;
}

}  // namespace fuseops::detail
